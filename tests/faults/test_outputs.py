"""The files `record` writes as root, against a local user (uid 65534) who owns the
directory they go to: a link planted at an output path must be replaced, never
followed (before the fix root wrote through it, into a root-only file), every output
is 0600, and under sudo the outputs go to the user who ran it."""

from __future__ import annotations

import os
import stat
import subprocess

from support.env import MOCK_APP, agent_cmd, mock_env, need_ebpf

NOBODY = 65534
OUTPUTS = ("out.pb.gz", "out.perfetto-trace", "out.ndjson")


def _nobody_dir(world_dir, name):
    d = world_dir / name
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    return d


def _record(d, **env):
    return subprocess.run(
        agent_cmd(
            "record",
            "-o",
            d / OUTPUTS[0],
            "--trace",
            d / OUTPUTS[1],
            "--events",
            d / OUTPUTS[2],
            "--",
            MOCK_APP,
            "--bench",
            "2000",
        ),
        env=mock_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_links_planted_at_record_outputs_are_replaced_not_followed(world_dir, built, tmp_path):
    need_ebpf()
    d = _nobody_dir(world_dir, "links")
    victims = []
    for i, name in enumerate(OUTPUTS):
        victim = tmp_path / f"root-only-{i}"  # pytest's tmp dirs are root-only
        victim.write_text("root's file\n")
        victim.chmod(0o600)
        victims.append(victim)
        # the local user plants the link, as themselves
        subprocess.run(["ln", "-s", str(victim), str(d / name)], user=NOBODY, group=NOBODY, check=True)
        assert (d / name).is_symlink()
    p = _record(d)
    assert p.returncode == 0, p.stderr[-2000:]
    for victim in victims:
        assert victim.read_text() == "root's file\n", victim
    for name in OUTPUTS:
        st = os.lstat(d / name)
        assert stat.S_ISREG(st.st_mode) and st.st_size > 0, name
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0, (name, oct(st.st_mode), st.st_uid)
    # nothing of the outputs is left behind under a temporary name
    assert sorted(x.name for x in d.iterdir()) == sorted(OUTPUTS)


def test_under_sudo_record_outputs_go_to_the_invoking_user(world_dir, built):
    need_ebpf()
    d = _nobody_dir(world_dir, "sudo")
    p = _record(d, SUDO_UID=str(NOBODY), SUDO_GID=str(NOBODY))
    assert p.returncode == 0, p.stderr[-2000:]
    for name in OUTPUTS:
        st = os.lstat(d / name)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o600), name
        # ...who can read it without root
        subprocess.run(["head", "-c", "1", str(d / name)], user=NOBODY, group=NOBODY, check=True, capture_output=True)
