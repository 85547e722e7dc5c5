"""`record --nanotrace FILE` reads a file a user names as root: under sudo, uid
65534 must not get a file into the trace that they could not read themselves (a
root-only file named directly or through a link they planted), and a FIFO must not
stall the capture. Each is refused in one line; the capture still completes."""

from __future__ import annotations

import os
import subprocess

from support.env import MOCK_APP, agent_cmd, mock_env, need_ebpf
from support.nanotrace_files import v1_file

NOBODY = 65534


def test_a_file_the_invoker_cannot_read_stays_out(world_dir, built, tmp_path):
    need_ebpf()
    secret = tmp_path / "root-only.nanotrace"        # pytest's tmp dirs are root-only
    secret.write_bytes(v1_file(kernel="k_cuLaunchKernel", grid=(4, 1, 1)))
    secret.chmod(0o644)                              # readable, but in a directory nobody may not enter
    d = world_dir / "nt"
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    subprocess.run(["ln", "-s", str(secret), str(d / "link.nanotrace")], user=NOBODY, group=NOBODY, check=True)
    subprocess.run(["mkfifo", str(d / "fifo.nanotrace")], user=NOBODY, group=NOBODY, check=True)
    mine = d / "mine.nanotrace"
    mine.write_bytes(v1_file(kernel="k_cuLaunchKernel", grid=(4, 1, 1)))
    os.chown(mine, NOBODY, NOBODY)
    p = subprocess.run(agent_cmd("record", "--trace", d / "t.json", "--trace-format", "chrome",
                                 "-o", d / "p.pb.gz", "--nanotrace", secret, "--nanotrace", d / "link.nanotrace",
                                 "--nanotrace", d / "fifo.nanotrace", "--nanotrace", mine,
                                 "--", MOCK_APP, "--bench", "20"),
                       env=mock_env(SUDO_UID=str(NOBODY), SUDO_GID=str(NOBODY)), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("gpu-agent: nanotrace: ")]
    assert len(said) == 4, p.stderr[-2000:]
    assert "may not read it; not merged" in said[0] and "may not read it; not merged" in said[1], said
    assert "not a readable regular file; not merged" in said[2], said
    assert "8 events under" in said[3], said
    doc = (d / "t.json").read_text()
    assert doc.count('"cat":"nanotrace"') == 8
