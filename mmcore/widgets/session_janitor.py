"""Gives a closed tab's memory back: its uploads, its downloads and its session state.

Streamlit (1.67) keeps a disconnected session for `server.disconnectedSessionTTL` seconds, so that a
tab that reconnects finds it again. When that time is up, the session is only dropped from its store
the next time the store is written, and it is never shut down: the files uploaded in it stay in the
upload manager for as long as the server runs (three 45 MB logs kept ~800 MB). One thread per server
asks the server's event loop, every SWEEP_S, to shut down the sessions whose time is up (Streamlit's
own `AppSession.shutdown`: uploads, download data, script runner) and to drop uploads whose session
is gone altogether. A shut-down session object can still be referenced for a long while (Streamlit's
message loop keeps the last sessions it flushed in its locals until another tab connects), so once its
script has stopped, the janitor also empties its session state: its uploaded files and parsed logs are
what that state holds.

This reaches into Streamlit's session manager (its session store and upload manager), the second
place after `mmcore.widgets.navigation` that uses a private Streamlit API: `sweep` does nothing where
those parts are not found, and tests/test_session_janitor.py fails loudly if an upgrade moves them.
"""
import ctypes
import gc
import logging
import threading
import time

import streamlit as st
from streamlit.runtime import Runtime

SWEEP_S = 5.0
SETTLE_SWEEPS = 3  # after a cleanup, the sweeps that collect and trim again
_settling = 0
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 256 * 1024
_closing = []  # sessions shut down whose state is emptied once their script has stopped
_LOG = logging.getLogger(__name__)


def _parts(runtime):
    """(session manager, its session store's TTL cache, upload manager's per-session files) or None."""
    manager = getattr(runtime, "_session_mgr", None)
    cache = getattr(getattr(manager, "_session_storage", None), "_cache", None)
    files = getattr(runtime.uploaded_file_mgr, "file_storage", None)
    if manager is None or not hasattr(cache, "expire") or not isinstance(files, dict):
        return None
    return manager, cache, files


def sweep(runtime):
    """Shut down the sessions whose reconnect time is up and drop the uploads of sessions that are gone
    -> the number of sessions cleaned up. Must run on the server's event loop (where Streamlit itself
    touches its session store)."""
    parts = _parts(runtime)
    if parts is None:
        return 0
    manager, cache, files = parts
    expired = cache.expire()
    for _session_id, info in expired:
        info.session.shutdown()
        _closing.append(info.session)
    emptied = _empty_stopped(_closing)
    live = {info.session.id for info in manager.list_active_sessions()} | set(cache.keys())
    orphans = [session_id for session_id in list(files) if session_id not in live]
    for session_id in orphans:
        runtime.uploaded_file_mgr.remove_session_files(session_id)
    global _settling
    if expired or orphans or emptied:
        _settling = SETTLE_SWEEPS
    if _settling:  # a shut-down session's script thread lets go of its state a moment later
        _settling -= 1
        gc.collect()  # a session's state holds reference cycles: free it now, not at some later collection
        _trim()
    return len(expired) + len(orphans)


def _empty_stopped(closing):
    """Empty the session state of the shut-down sessions in `closing` whose script runner has let go
    (removing them from the list) -> how many were emptied."""
    stopped = [session for session in closing if getattr(session, "_scriptrunner", None) is None]
    for session in stopped:
        session.session_state.clear()
        closing.remove(session)
    return len(stopped)


def _glibc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: its allocator decides
        return None


def _trim():
    """Hand the freed heap pages back to the system (glibc keeps them for reuse otherwise, and a closed
    tab's parsed logs leave many of them)."""
    libc = _glibc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def _map_large_blocks():
    """Have glibc give every block of MMAP_THRESHOLD bytes or more its own mapping, returned to the system
    when freed. By default glibc raises that threshold to the largest block freed so far (up to 32 MB), so
    after the first upload the next uploads' megabyte buffers land in the heap, where they leave holes
    that `malloc_trim` cannot always give back."""
    libc = _glibc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def _loop(runtime):
    while True:
        time.sleep(SWEEP_S)
        try:
            runtime._get_async_objs().eventloop.call_soon_threadsafe(sweep, runtime)
        except RuntimeError:  # the event loop has closed: the server is stopping
            return
        except Exception:  # never let cleaning up take the server down
            _LOG.exception("session janitor")


@st.cache_resource(show_spinner=False)
def start():
    """Start the server's one janitor thread (a no-op under AppTest, which has no real server)."""
    if not Runtime.exists() or type(Runtime.instance()) is not Runtime:
        return None
    runtime = Runtime.instance()
    if _parts(runtime) is None:
        _LOG.warning("session janitor: this Streamlit version keeps its sessions elsewhere; not started")
        return None
    _map_large_blocks()
    thread = threading.Thread(target=_loop, args=(runtime,), name="minimind-session-janitor", daemon=True)
    thread.start()
    return thread
