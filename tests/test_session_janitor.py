"""The session janitor (mmcore.widgets.session_janitor) on Streamlit's own session store and upload
manager: a session whose reconnect time is up is shut down, uploads of a session that is gone are
dropped, a live session keeps its uploads. Fails loudly when a Streamlit upgrade moves those parts
(the janitor would then do nothing). tests/test_browser_uploads.py measures it in a real server."""
import inspect
from types import SimpleNamespace

from streamlit.runtime.app_session import AppSession
from streamlit.runtime.caching.ttl_cache import TTLCache

from streamlit.runtime.memory_session_storage import MemorySessionStorage
from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.runtime.session_manager import SessionInfo
from streamlit.runtime.state import SessionState
from streamlit.runtime.uploaded_file_manager import UploadedFileRec
from streamlit.runtime.websocket_session_manager import WebsocketSessionManager

from mmcore.widgets import session_janitor


class Session:
    """Stands in for an AppSession (which needs a running server): its id, its (real) session state, its
    script runner while a script runs, and a shutdown that drops its uploads as AppSession.shutdown does."""

    def __init__(self, session_id, uploads):
        self.id = session_id
        self.uploads = uploads
        self.closed = False
        self.session_state = SessionState()
        self._scriptrunner = None

    def shutdown(self):
        self.uploads.remove_session_files(self.id)
        self.closed = True


class Clock:
    """The session store's clock, moved by the test: a session expires when the test says its time is up,
    however slowly a loaded machine runs the lines between."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def runtime_with(ttl_s, clock=None):
    uploads = MemoryUploadedFileManager("/_stcore/upload_file")
    storage = MemorySessionStorage(ttl_seconds=ttl_s)
    if clock is not None:  # Streamlit's own TTL cache, on the test's clock
        storage._cache = TTLCache(maxsize=storage._cache.maxsize, ttl=ttl_s, timer=clock)
    manager = WebsocketSessionManager(storage, uploads, ScriptCache(), None)
    return SimpleNamespace(_session_mgr=manager, uploaded_file_mgr=uploads), manager, uploads


def upload(uploads, session_id, size):
    uploads.add_file(session_id, UploadedFileRec(f"{session_id}-file", "run.log", "text/plain", b"x" * size))


def test_streamlit_keeps_the_parts_the_janitor_cleans_where_it_looks_for_them():
    runtime, manager, uploads = runtime_with(120)
    assert session_janitor._parts(runtime) == (manager, manager._session_storage._cache, uploads.file_storage)


def test_expired_sessions_are_shut_down_and_orphan_uploads_dropped():
    clock = Clock()
    runtime, manager, uploads = runtime_with(0.2, clock)
    closed = Session("closed-tab", uploads)
    manager._session_storage.save(SessionInfo(client=None, session=closed))
    upload(uploads, "closed-tab", 1000)
    upload(uploads, "vanished-tab", 2000)  # dropped from the store without a shutdown: Streamlit's leak
    clock.now += 0.3  # past the reconnect time
    assert session_janitor.sweep(runtime) == 2
    assert closed.closed and uploads.file_storage == {}

    kept = Session("reconnecting-tab", uploads)  # disconnected just now: it may come back
    manager._session_storage.save(SessionInfo(client=None, session=kept))
    upload(uploads, "reconnecting-tab", 3000)
    assert session_janitor.sweep(runtime) == 0
    assert not kept.closed and set(uploads.file_storage) == {"reconnecting-tab"}


def test_a_runtime_without_those_parts_is_left_alone():
    assert session_janitor.sweep(SimpleNamespace(uploaded_file_mgr=object())) == 0


def test_streamlit_keeps_a_sessions_state_and_script_runner_where_the_janitor_looks():
    assert isinstance(AppSession.session_state, property)
    assert "self._scriptrunner" in inspect.getsource(AppSession.__init__)


def test_an_expired_sessions_state_is_emptied_once_its_script_has_stopped():
    clock = Clock()
    runtime, manager, uploads = runtime_with(0.2, clock)
    closed = Session("closed-tab", uploads)
    closed.session_state["logs.parsers"] = {"run.log": "a parsed log"}
    closed._scriptrunner = object()  # a script still running: it may still read its state
    manager._session_storage.save(SessionInfo(client=None, session=closed))
    clock.now += 0.3  # past the reconnect time
    session_janitor.sweep(runtime)
    assert closed.closed and "logs.parsers" in closed.session_state
    closed._scriptrunner = None
    session_janitor.sweep(runtime)
    assert "logs.parsers" not in closed.session_state
    assert closed not in session_janitor._closing
