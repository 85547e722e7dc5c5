"""`gpu-agent ui` as the tests start it, Debian's Chromium driven by Playwright, and
what the tests read back from the page."""

from __future__ import annotations

import base64
import http.client
import re
import shutil
import socket
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from support.env import agent_cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ui:
    """The real `gpu-agent ui` CLI in a process of its own; url once it listens."""

    def __init__(self, store: Path, *extra: str, listen: str = "127.0.0.1:0"):
        self.proc = subprocess.Popen(
            agent_cmd("ui", "--profiles", store, "--listen", listen, *extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = []
        for line in self.proc.stderr:
            self.lines.append(line)
            if " UI on http://" in line:
                self.url = line[line.index("http://") :].split()[0]
                break
        else:
            pytest.fail("gpu-agent ui did not start: " + "".join(self.lines))
        port = urllib.parse.urlsplit(self.url).port
        self.port = port

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def http_get(port: int, path: str, headers: dict | None = None, method: str = "GET"):
    """A raw request (the path is sent as it is, never normalised): (status, headers, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.putrequest(method, path, skip_host=bool(headers and "Host" in headers))
        for k, v in (headers or {}).items():
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("Debian's chromium is not installed (deploy/install-deps.sh installs it)")


def launch_browser(playwright):
    # Debian's Chromium, never Playwright's own download; as root it needs --no-sandbox.
    return playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])


# -- reading the page ----------------------------------------------------------------
def counter(page, name: str) -> int:
    return int(page.evaluate(f"Number(document.body.dataset.{name} || 0)"))


def wait_counter(page, name: str, past: int, timeout: float = 30_000) -> None:
    """Until app.js has rendered again since its body's data-NAME counter was `past`.
    A selector, not a polled script: the page's Content-Security-Policy forbids eval."""
    page.wait_for_selector(f'body[data-{name}]:not([data-{name}="{past}"])', state="attached", timeout=timeout)


def root_total(page, container: str = "#flame") -> int:
    """The flame graph's root frame total, as its frame's title says it (exact)."""
    title = page.text_content(f'{container} g[name="all"] title')
    m = re.match(r"all: ([\d,]+) ", title or "")
    assert m, f"no total in the root frame's title: {title!r}"
    return int(m.group(1).replace(",", ""))


def frame_fill(page, selector: str) -> str:
    return page.get_attribute(selector + " rect", "fill") or ""


def hue(fill: str) -> int:
    m = re.match(r"hsl\((\d+),", fill)
    assert m, fill
    return int(m.group(1))


def rgb(fill: str) -> tuple[int, int, int]:
    m = re.match(r"rgb\((\d+)\s*,\s*(\d+)\s*,\s*(\d+)\)", fill)
    assert m, fill
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


# Pixels of a screenshot, counted by colour in the browser itself (a canvas decodes
# the PNG): how much of the picture is kernel green, graph purple, native orange...
_COUNT_COLOURS = """async (b64) => {
  const img = new Image();
  img.src = "data:image/png;base64," + b64;
  await img.decode();
  const c = document.createElement("canvas");
  c.width = img.width; c.height = img.height;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const out = {width: c.width, height: c.height, kernel: 0, graph: 0, native: 0, python: 0, white: 0};
  for (let i = 0; i < d.length; i += 4) {
    const r = d[i] / 255, gr = d[i + 1] / 255, b = d[i + 2] / 255;
    const max = Math.max(r, gr, b), min = Math.min(r, gr, b), l = (max + min) / 2;
    if (l > 0.97) { out.white++; continue; }
    if (max - min < 0.15) continue;
    let h;
    if (max === r) h = 60 * (((gr - b) / (max - min)) % 6);
    else if (max === gr) h = 60 * ((b - r) / (max - min) + 2);
    else h = 60 * ((r - gr) / (max - min) + 4);
    if (h < 0) h += 360;
    if (h >= 110 && h <= 145) out.kernel++;
    else if (h >= 260 && h <= 290) out.graph++;
    else if (h >= 20 && h <= 40) out.native++;
    else if (h >= 205 && h <= 225) out.python++;
  }
  return out;
}"""


def screenshot_colours(page, png: bytes) -> dict:
    return page.evaluate(_COUNT_COLOURS, base64.b64encode(png).decode())


def open_range(page, ui, frm: int, to: int) -> None:
    """Opens the UI, then chooses the range by typing it, as a user does (whole
    seconds: each phase ends in idle seconds, so no window is cut off)."""
    page.goto(ui.url)
    wait_counter(page, "renders", 0)
    seen = counter(page, "renders")
    page.fill("#from", page.evaluate(f"fmtTime({frm})"))
    page.fill("#to", page.evaluate(f"fmtTime({to})"))
    page.click("#apply-range")
    wait_counter(page, "renders", seen)


def rerendered(page, action) -> None:
    seen = counter(page, "renders")
    action()
    wait_counter(page, "renders", seen)
