"""`alphagym serve`: the warm scoring process answers `alphagym score` with the card an in-process score
gives, rebuilds its verifier when an input or a parameter changed, and steps aside (the command scores in
its own process) when it is gone, stale or serves another installation."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from alphagym.cli import main
from alphagym.pipeline import verifier_inputs
from alphagym.verifier.server import SOCKET_ENV, ScoreServer

FORMULA = "rank(ts_std(volume, 20) / ts_mean(volume, 20))"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, root):
    """A smoke-profile train and holdout panel (no archive: the verifier seeds one in memory)."""
    results = tmp_path_factory.mktemp("serve")
    common = ["--params", str(root / "params.yaml"), "--set", "profile=smoke", "--set",
              f"paths.results={results}", "--set", "tracking.enabled=false"]
    assert main(["download", *common]) == 0
    assert main(["panel", *common]) == 0
    return results, common


def _card(capsys, args) -> dict:
    capsys.readouterr()
    assert main(["score", *args, "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    card.pop("timings_ms")                     # wall-clock times: the one field allowed to differ
    return card


@pytest.fixture
def server(tmp_path, monkeypatch):
    path = tmp_path / "score.sock"
    monkeypatch.setenv(SOCKET_ENV, str(path))
    srv = ScoreServer(path, verifier_inputs, idle_timeout=300)
    srv.bind()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.close()
    thread.join(10)
    assert not thread.is_alive() and not path.exists()


def test_served_cards_equal_in_process_cards_and_follow_changed_inputs(smoke, server, capsys):
    results, common = smoke
    served = _card(capsys, [FORMULA, *common])
    assert (server.served, server.reloads) == (1, 1)
    assert served == _card(capsys, [FORMULA, "--no-server", *common]) and server.served == 1
    assert served["valid"] and "seeded the novelty archive" in served["note"]
    assert _card(capsys, [FORMULA, *common]) == served and (server.served, server.reloads) == (2, 1)

    for extra in (["--window", "holdout"], ["--answer", "<think>x</think><alpha>rank(close</alpha>"],
                  ["--set", "verifier.costs.train.fee_bps=40"]):
        args = [FORMULA, *extra] if extra[0] != "--answer" else extra
        assert _card(capsys, [*args, *common]) == _card(capsys, [*args, "--no-server", *common])
    assert server.reloads == 3                 # holdout window, then the changed costs: new verifiers

    # a rerun of the panel stage replaces train.parquet (other dates): the next card is computed on it
    assert main(["panel", *common, "--set", "data.train_end=2025-05-01"]) == 0
    before = server.reloads
    after = _card(capsys, [FORMULA, *common])
    assert server.reloads == before + 1
    assert after["metrics"] != served["metrics"]
    assert after == _card(capsys, [FORMULA, "--no-server", *common, "--set", "data.train_end=2025-05-01"])
    assert main(["panel", *common]) == 0       # restore the module's panel


def test_user_errors_from_the_server_read_as_in_process(smoke, server, tmp_path, capsys):
    _, common = smoke
    missing = [*common, "--set", f"paths.results={tmp_path / 'empty'}"]
    capsys.readouterr()
    assert main(["score", FORMULA, *missing]) == 2
    served_err = capsys.readouterr().err
    assert main(["score", FORMULA, "--no-server", *missing]) == 2
    assert served_err == capsys.readouterr().err and "panel" in served_err
    assert server.served == 0


def test_a_refusing_or_dead_server_means_scoring_here(smoke, server, capsys):
    _, common = smoke
    reference = _card(capsys, [FORMULA, "--no-server", *common])
    server.code = "edited since start"        # as if a source file changed after the server started
    capsys.readouterr()
    assert main(["score", FORMULA, "--json", *common]) == 0
    out = capsys.readouterr()
    card = json.loads(out.out)
    card.pop("timings_ms")
    assert card == reference and server.served == 0 and server.refused == 1
    assert "scored in this process: the alphagym source changed" in out.err
    deadline = time.monotonic() + 10          # a server of old code can serve nobody: it stops
    while server.path.exists():
        assert time.monotonic() < deadline, "the stale server did not stop"
        time.sleep(0.05)

    # a socket file nobody listens on (a killed server's): scored here, silently
    server.close()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(server.path))
    dead.close()
    assert server.path.exists()
    assert _card(capsys, [FORMULA, *common]) == reference
    server.path.unlink()


def test_serve_command_end_to_end(smoke, tmp_path):
    """The real processes: `alphagym serve` answers `alphagym score`, a second server refuses to start,
    SIGTERM stops the first and removes its socket."""
    _, common = smoke
    env = {**os.environ, SOCKET_ENV: str(tmp_path / "s.sock")}
    cli = [sys.executable, "-m", "alphagym.cli"]
    srv = subprocess.Popen([*cli, "serve", "--idle-timeout", "120", *common], env=env,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "s.sock").exists():
            assert srv.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        out = subprocess.run([*cli, "score", FORMULA, "--json", *common], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0 and json.loads(out.stdout)["valid"]
        assert f"scored by `alphagym serve` (pid {srv.pid})" in out.stderr
        second = subprocess.run([*cli, "serve", *common], env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and "already listens" in second.stderr
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(30)
    assert srv.returncode == 128 + signal.SIGTERM and not (tmp_path / "s.sock").exists()


def test_score_starts_a_server_for_the_next_calls(smoke, tmp_path):
    """Without a server, `alphagym score` scores in its own process and starts `alphagym serve` in the
    background (warm with the same params); the next call is answered by it. ALPHAGYM_SCORE_AUTOSERVE=0 and
    --no-server start none."""
    _, common = smoke
    sock = tmp_path / "auto.sock"
    cli = [sys.executable, "-m", "alphagym.cli", "score", FORMULA, "--json", *common]
    off = {**os.environ, SOCKET_ENV: str(sock), "ALPHAGYM_SCORE_AUTOSERVE": "0"}
    on = {**off, "ALPHAGYM_SCORE_AUTOSERVE": "1"}
    for env, extra in ((off, []), (on, ["--no-server"])):
        out = subprocess.run([*cli, *extra], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "started" not in out.stderr
    time.sleep(0.5)
    assert not sock.exists()
    first = subprocess.run(cli, env=on, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    m = re.search(r"started `alphagym serve` \(pid (\d+)", first.stderr)
    assert m, first.stderr
    pid = int(m.group(1))
    try:
        deadline = time.monotonic() + 60      # a user's next command comes seconds later; the test waits
        while not sock.exists():
            assert time.monotonic() < deadline, "the started server never listened"
            time.sleep(0.1)
        second = subprocess.run(cli, env=on, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0 and f"scored by `alphagym serve` (pid {pid})" in second.stderr
        a, b = json.loads(first.stdout), json.loads(second.stdout)
        a.pop("timings_ms"), b.pop("timings_ms")
        assert a == b
    finally:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while sock.exists():
        assert time.monotonic() < deadline, "the started server did not stop on SIGTERM"
        time.sleep(0.1)
