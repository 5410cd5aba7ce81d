"""A warm scoring process for `alphagym score`: `alphagym serve`.

A fresh `alphagym score` spends 1-2 s importing pandas and numba, loading numba's cached kernels and
building the verifier before it scores anything (BENCHMARKS.md). `alphagym serve` pays that once and
answers `alphagym score` over a Unix socket; the command then costs its own start-up (params, argument
parsing) and the scoring. The first `alphagym score` of a folder starts one (cli `_start_server`).

It never answers from stale inputs. Every request carries the params file, the `--set` overrides and the
client's folder; the server resolves the params itself and keeps one verifier per (resolved params,
window), rebuilt whenever any file that verifier read (panel, novelty archive, gate report, kept worlds)
changed size, mtime or inode since it was loaded (stages move their outputs in, so a rerun is a new
inode). It refuses (and `alphagym score` then scores in its own process, saying why) when the client runs
in another folder or from another installation, or when the package's source changed since it started
(then it stops too: it could serve nobody).

Written by hand on the standard library (`socketserver` adds threads and nothing this needs): one
request at a time, one JSON line each way. The client half (`request`) imports nothing beyond the
standard library, so asking the server costs milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import alphagym
from alphagym.errors import AlphagymError, ConfigError
from alphagym.params import Params

PROTOCOL = 1
MAX_REQUEST = 4 << 20          # bytes: a model answer with a long reasoning block fits many times over
SOCKET_ENV = "ALPHAGYM_SCORE_SOCKET"


def socket_path(cwd: str | Path | None = None) -> Path:
    """Where the server of a project folder listens: `$ALPHAGYM_SCORE_SOCKET`, else a per-user folder in
    the temp dir and a name from the folder's absolute path (a Unix socket path must stay under 108
    bytes, which a project's own path need not)."""
    if os.environ.get(SOCKET_ENV):
        return Path(os.environ[SOCKET_ENV])
    folder = str(Path(cwd or os.getcwd()).resolve())
    key = hashlib.sha256(folder.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"alphagym-{os.getuid()}" / f"score-{key}.sock"


def code_signature() -> str:
    """Size and mtime of every source file of the installed package: a server started before an edit
    would score with the old code."""
    root = Path(alphagym.__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        st = p.stat()
        h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _client_identity() -> dict[str, str]:
    return {"cwd": str(Path.cwd().resolve()), "package": str(Path(alphagym.__file__).parent.resolve())}


# --- client -----------------------------------------------------------------------------------------------

def request(text: str, answer: bool, window: str, params_file: str, overrides: list[str],
            path: Path | None = None, timeout: float = 600.0) -> dict[str, Any] | None:
    """Ask the project's scoring server for a card. None when no server listens (no socket, or a stale
    one), else the server's reply: {"card", "text", "note", "pid"} or {"error"} (a user error, raised as
    in-process scoring would) or {"refused": why} (the caller scores in its own process)."""
    path = path or socket_path()
    if not path.exists():
        return None
    payload = {"protocol": PROTOCOL, **_client_identity(), "params": str(Path(params_file).resolve()),
               "set": list(overrides), "window": window, "text": text, "answer": bool(answer)}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(json.dumps(payload).encode() + b"\n")
            reply = _read_line(s)
    except (ConnectionRefusedError, FileNotFoundError):
        return None                      # the socket file of a server that is gone
    except OSError as exc:
        return {"refused": f"the scoring server at {path} did not answer ({exc})"}
    try:
        return dict(json.loads(reply))
    except ValueError:
        return {"refused": f"the scoring server at {path} sent a malformed reply"}


def _read_line(s: socket.socket) -> bytes:
    chunks, size = [], 0
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n") or size > MAX_REQUEST:
            break
    return b"".join(chunks)


# --- server -----------------------------------------------------------------------------------------------

def _stat(p: Path) -> list[Any]:
    try:
        st = p.stat()
    except FileNotFoundError:
        return [str(p), None]
    return [str(p), st.st_size, st.st_mtime_ns, st.st_ino]


def input_signature(inputs: Mapping[str, Path]) -> list[Any]:
    """The files a verifier read (`load_verifier`'s `inputs`, a folder as its parquet files), as
    (path, size, mtime_ns, inode) rows."""
    rows = []
    for path in inputs.values():
        files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
        rows += [_stat(p) for p in files]
    return rows


class ScoreServer:
    """Serves score requests for the project folder it runs in. `inputs(params, window)`: the files a
    verifier reads (`pipeline.verifier_inputs`, which the CLI passes: the server resolves params per
    request). `served`, `reloads` and `refused` count what it did (the tests read them)."""

    def __init__(self, path: Path, inputs: Callable[[Params, str], Mapping[str, Path]],
                 idle_timeout: float = 3600.0, log: Callable[[str], None] = lambda line: None) -> None:
        self.path, self.inputs, self.idle_timeout, self.log = Path(path), inputs, float(idle_timeout), log
        self.identity = _client_identity()
        self.code = code_signature()
        self.verifiers: dict[str, tuple[list[Any], Any, str | None]] = {}
        self.max_verifiers = 4           # e.g. train and holdout of two profiles; each holds its panels
        self.served = self.reloads = self.refused = 0
        self.stale = False
        self._sock: socket.socket | None = None

    def bind(self) -> None:
        """Listen on the socket; a socket file nobody answers on (a killed server's) is replaced, a live
        one is an error."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(self.path))
            except (ConnectionRefusedError, FileNotFoundError):
                self.path.unlink(missing_ok=True)
            else:
                raise ConfigError(f"a scoring server already listens at {self.path} for {self.identity['cwd']}")
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        sock.listen(8)
        sock.settimeout(self.idle_timeout)
        self._sock = sock

    def serve_forever(self) -> None:
        """Answer requests until `idle_timeout` seconds pass without one (or the process is stopped);
        the socket file is removed on the way out."""
        if self._sock is None:
            self.bind()
        assert self._sock is not None
        try:
            while True:
                try:
                    conn, _ = self._sock.accept()
                except TimeoutError:
                    self.log(f"idle for {self.idle_timeout:g} s: stopping")
                    return
                except OSError:          # closed by close() from another thread
                    return
                with conn:
                    conn.settimeout(60.0)
                    try:
                        raw = _read_line(conn)
                        reply = self.handle(json.loads(raw))
                    except (ValueError, OSError) as exc:
                        reply = {"refused": f"malformed request ({exc})"}
                    try:
                        conn.sendall(json.dumps(reply).encode() + b"\n")
                    except OSError:
                        pass             # the client gave up; the next request is unaffected
                if self.stale:
                    self.log("the alphagym source changed: stopping")
                    return
        finally:
            self.close()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)   # wakes an accept() blocked in another thread
            except OSError:
                pass
            self._sock.close()
            self._sock = None
            self.path.unlink(missing_ok=True)

    def warm(self, params_file: str, overrides: list[str], window: str) -> None:
        """Load a verifier and score one formula with it (numba's cached kernels are loaded on first use)
        before the first request asks."""
        t0 = time.perf_counter()
        try:
            verifier, _, _ = self._verifier(params_file, overrides, window)
            verifier.score("rank(ts_std(volume, 20) / ts_mean(volume, 20))")
        except AlphagymError as exc:         # e.g. no panel yet: each request then gets the same error
            self.log(f"warm: not loaded ({exc})")
            return
        self.log(f"warm: the {window} verifier loaded in {time.perf_counter() - t0:.2f} s")

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        why = self._refusal(req)
        if why:
            self.refused += 1
            self.log(f"refused: {why}")
            return {"refused": why}
        t0 = time.perf_counter()
        try:
            verifier, note, reloaded = self._verifier(req["params"], list(req["set"]), str(req["window"]))
            card = verifier.score(str(req["text"]), answer=bool(req["answer"]))
        except AlphagymError as exc:
            return {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a bug: the client rescores in its own process, traceback and all
            self.refused += 1
            self.log(f"failed: {type(exc).__name__}: {exc}")
            return {"refused": f"the scoring server failed ({type(exc).__name__}: {exc})"}
        self.served += 1
        self.log(f"scored {card.text[:60]!r} on {req['window']} in {time.perf_counter() - t0:.3f} s"
                 + (" (verifier loaded)" if reloaded else ""))
        return {"card": card.to_json(), "text": card.text, "note": note, "pid": os.getpid()}

    def _refusal(self, req: dict[str, Any]) -> str | None:
        if req.get("protocol") != PROTOCOL:
            return f"protocol {req.get('protocol')!r}, server speaks {PROTOCOL}"
        if req.get("cwd") != self.identity["cwd"]:
            return f"the server (pid {os.getpid()}) serves {self.identity['cwd']}, not {req.get('cwd')}"
        if req.get("package") != self.identity["package"]:
            return f"the server (pid {os.getpid()}) runs the alphagym installed at {self.identity['package']}"
        if code_signature() != self.code:
            self.stale = True            # it can serve nobody from now on: stop, so a fresh one can start
            return (f"the alphagym source changed since the server (pid {os.getpid()}) started: it stops; "
                    "the next `alphagym score` starts a fresh one")
        return None

    def _verifier(self, params_file: str, overrides: list[str], window: str) -> tuple[Any, str | None, bool]:
        from alphagym.config import load_params, to_builtin
        from alphagym.verifier.loading import load_verifier

        params = load_params(params_file, overrides)
        key = json.dumps([to_builtin(params), window], sort_keys=True, default=str)
        inputs = self.inputs(params, window)
        signature = input_signature(inputs)
        cached = self.verifiers.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1], cached[2], False
        verifier, note = load_verifier(params, window, inputs)
        # read again after loading: a file replaced while it was being read must not pin the old version
        self.verifiers.pop(key, None)
        self.verifiers[key] = (signature if input_signature(inputs) == signature else [], verifier, note)
        while len(self.verifiers) > self.max_verifiers:          # oldest first: dicts keep insertion order
            self.verifiers.pop(next(iter(self.verifiers)))
        self.reloads += 1
        return verifier, note, True
