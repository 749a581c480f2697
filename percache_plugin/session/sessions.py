"""``pc.sessions``: the conversations of one handle (create, list, fork, reset, delete) and
``pc.chat``, which runs a turn on one of them."""

from __future__ import annotations

import builtins
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..kv.store import KVStore
from ..personas.registry import Personas
from ..personas.runtime import PersonaRuntime
from ..turnlog import TurnLog
from .block_tags import BlockTags
from .chat import ChatRunner
from .evict import compact
from .info import SessionInfo, UnknownSession, session_infos
from .layout import ChatLayout
from .locks import SessionLocks
from .log_turn import log_turn
from .memory_region import RegionMemory, forget_fact
from .persist import SESSIONS_DB, SessionStore
from .reply import ChatStats, Reply
from .restore import adopt, read_session
from .state import Session
from .transitions import branch, empty, follow_weights

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["Sessions", "SessionInfo", "UnknownSession", "DEFAULT_SESSION"]

DEFAULT_SESSION = "default"

log = logging.getLogger("percache")


class Sessions:
    """The conversations of one handle. ``"default"`` exists from the start; other sessions
    are made with :meth:`create` or :meth:`fork`."""

    def __init__(self, engine: Engine, use_template: bool) -> None:
        self._engine = engine
        self.memory = RegionMemory()  # recall per turn, set by attach_memory()
        self.deleted: list[Callable[[str], object]] = []  # called with a deleted session's name
        self._layout = ChatLayout(engine.tokenizer, use_template)
        self._runner = ChatRunner(engine, self._layout, self._tag_blocks)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.RLock()
        self._root = root = engine.store.path
        self._stores: dict[str, SessionStore] = {}  # by fingerprint: sessions follow the weights
        self._stores_lock = threading.Lock()  # a leaf: nothing is acquired while holding it
        self._locks = SessionLocks(root)  # one turn at a time per session across handles
        self._memory_tags = BlockTags() if root is None else None  # no session database: in memory
        self.log = TurnLog(root / SESSIONS_DB if root is not None else None)
        self._personas = PersonaRuntime(engine, self._layout, root,
                                        root / SESSIONS_DB if root is not None else None)
        if not self._stored(DEFAULT_SESSION):
            self.create(DEFAULT_SESSION)

    @property
    def _store(self) -> SessionStore | None:
        """The session store of the weights in use (None without a store directory)."""
        if self._root is None:
            return None
        return self._store_of(self._engine.fingerprint)

    def _store_of(self, fp: str) -> SessionStore:
        assert self._root is not None
        with self._stores_lock:
            if fp not in self._stores:
                self._stores[fp] = SessionStore(self._root, fp)
            return self._stores[fp]

    def _stored(self, name: str) -> bool:
        store = self._store
        return store is not None and name in store.names()

    def close(self) -> None:
        with self._stores_lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
        self.log.close()
        self._personas.close()
        if self._memory_tags is not None:
            self._memory_tags.close()

    @property
    def personas(self) -> Personas:
        """The personas (``add``, ``get``, ``list``, ``remove``)."""
        return self._personas.personas

    @property
    def layout(self) -> ChatLayout:
        return self._layout

    def _new(self, name: str, system: str | None) -> Session:
        head, glue = self._layout.head(system)
        return Session(name, system, head, glue, fingerprint=self._engine.fingerprint)

    def create(self, name: str, *, system: str | None = None) -> Session:
        """A new, empty session; ``system`` is its system prompt (persistent, never evicted).

        :raises ValueError: the name is taken or empty."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"session name must be a non-empty str, got {name!r}")
        with self._lock:
            if name in self._sessions or self._stored(name):
                raise ValueError(f"session {name!r} already exists (reset() or delete() it first)")
            self._sessions[name] = session = self._new(name, system)
            return session

    def get(self, name: str) -> Session:
        """The session ``name``.

        :raises UnknownSession: no such session."""
        with self._lock:
            if name not in self._sessions and self._stored(name):
                self._load(name)
            if name not in self._sessions:
                known = ", ".join(sorted(self.names())) or "none"
                raise UnknownSession(
                    f"no session {name!r} (known: {known}); create it with pc.sessions.create()")
            return self._sessions[name]

    def names(self) -> list[str]:
        """Every session, in memory or in the store."""
        store = self._store
        stored = store.names() if store is not None else []
        return sorted(set(self._sessions) | set(stored))

    def _load(self, name: str) -> None:
        store = self._store
        assert store is not None
        session = read_session(self._engine, store, name)
        if session is not None:
            self._sessions[name] = session

    def _refresh(self, session: Session) -> None:
        """Continue from the session's latest stored state (called holding its lock): another
        handle or process may have run turns on it, reset or deleted it since this copy was
        read. Reset or deleted elsewhere, it starts over empty with its system prompt."""
        store = self._store
        latest = store.latest(session.name) if store is not None else None
        if latest is None or latest[0] == session.version:
            return
        version, fp = latest
        fresh = read_session(self._engine, self._store_of(fp), session.name)
        adopt(session, fresh or self._new(session.name, session.system), version)

    def __contains__(self, name: object) -> bool:
        return name in self._sessions

    def list(self) -> list[SessionInfo]:
        """Every session, by name: those of the weights in use, and those saved only under
        other weights (a LoRA persona's, with ``fingerprint`` set), read from the store."""
        with self._lock:
            sessions = [self.get(n) for n in self.names()]
            elsewhere = self._store.elsewhere() if self._store is not None else []
        return session_infos(sessions, elsewhere)

    def fork(self, source: str, name: str) -> Session:
        """A branch of ``source`` named ``name`` (candidate replies, retries): the same turns,
        and a cache over the same K/V tensors until either side grows."""
        src = self.get(source)
        with src.lock:
            with self._lock:
                if name in self._sessions or self._stored(name):
                    raise ValueError(f"session {name!r} already exists")
                self._sessions[name] = out = branch(src, name)
        return out

    def reset(self, name: str) -> None:
        """Forget the conversation of ``name`` (its system prompt stays)."""
        session = self.get(name)
        with session.lock, self._locks.hold(name, self._engine.config.session_wait_s):
            empty(session, self._new(name, session.system))
            self._tags().drop_session(name, self._kv_store)
            store = self._store
            if store is not None:
                session.version = store.delete(name)

    def pin(self, name: str, turn_id: int, pinned: bool = True) -> None:
        """Pin a turn of ``name`` (never evicted, not counted against the budget) or unpin it;
        stored with the session's next turn (its turn rows are written again).

        :raises KeyError: the turn is not in context."""
        session = self.get(name)
        with session.lock:
            for turn in session.turns:
                if turn.turn_id == turn_id:
                    turn.pinned, session.rewrite = pinned, True
                    return
            raise KeyError(f"session {name!r} has no turn {turn_id} in context")

    def compact(self, name: str) -> int:
        """Free the slots of turns ``masked`` eviction excluded (idle-time work): they leave
        the conversation and later turns are recomputed exactly with the next turn. Returns the
        tokens freed."""
        session = self.get(name)
        with session.lock, self._engine.lock:
            return compact(session)

    def delete(self, name: str) -> None:
        """Remove the session ``name`` under every fingerprint (one saved only under a persona's
        adapter too), free its K/V, delete its turns from the turn log and checkpoint the
        session database, then call the ``deleted`` listeners (``pc.memory``: the facts drawn
        from it alone)."""
        store = self._store
        with self._lock:
            elsewhere = name not in self._sessions and not self._stored(name) and store is not None \
                and store.saved(name)  # nothing to load under the weights in use
        held = contextlib.nullcontext() if elsewhere else self.get(name).lock  # get: UnknownSession
        with held, self._locks.hold(name, self._engine.config.session_wait_s), self._lock:
            self._sessions.pop(name, None)
            self._tags().drop_session(name, self._kv_store)  # its prefix blocks, under every fingerprint
            if store is not None:
                store.delete(name)
            self.log.delete_session(name)
        for listener in self.deleted:
            listener(name)

    def _tags(self) -> BlockTags:
        """Where the prefix blocks sessions publish are tagged (:mod:`.block_tags`): the session
        database's table, one for every fingerprint (each row names its own)."""
        if self._memory_tags is not None:
            return self._memory_tags
        return self._store_of(self._engine.fingerprint).tags

    def _tag_blocks(self, session: Session, blocks: builtins.list[tuple[str, builtins.list[str]]]) -> None:
        self._tags().tag(session.fingerprint, session.name, blocks)

    def _kv_store(self, fp: str) -> KVStore:
        return self._engine.stores.get(fp, self._engine.config)

    def attach_memory(self, memory: Any) -> None:
        """Recall facts from ``memory`` (``pc.memory``) and take the facts it forgets out of sessions."""
        self.memory.recall, self.memory.current = memory.recall, memory.current
        self.memory.after_turn, self.memory.forget_again = memory.after_turn, memory.forget_again
        self.deleted.append(memory.forget_session)
        memory.forgotten.append(self.forget_fact)
        memory.forgotten.append(self.log.forget_fact)  # no hash of a context that held the fact
        memory.updated.append(lambda fact_id: self.forget_fact(fact_id, keep_region=True))

    def forget_fact(self, fact_id: str, *, keep_region: bool = False) -> int:
        """Take a forgotten (or updated) fact out of every session (``memory_region.forget_fact``)."""
        with self._lock:
            live = list(self._sessions.values())
        changed = forget_fact(self._engine, live, self._store, fact_id, keep_region=keep_region)
        self._tags().drop_fact(fact_id, self._kv_store)  # blocks of evicted turns, of corrupt rows
        return changed

    def chat(self, message: str, session: str = DEFAULT_SESSION, *, memory_scope: str | None = None,
             persona: str | None = None, **generate_kwargs: Any) -> Reply:
        """One turn: see :meth:`PerCache.chat`."""
        if persona is not None and session not in self._sessions:
            self._load_under(persona, session)
        state = self.get(session)
        engine = self._engine
        # two calls on one session run one after the other, in this handle and across handles
        # and processes sharing the store (the file lock); each starts from the latest state
        with state.lock, self._locks.hold(session, engine.config.session_wait_s):
            if engine.closed:
                raise RuntimeError("this percache handle was disabled; call enable() again")
            with engine.preemption.foreground(engine.lock):
                t0 = time.perf_counter()
                with self._personas.applied(persona) as chosen:
                    self._refresh(state)
                    self._follow_weights(state)
                    stats = ChatStats(session=session)
                    store_head = self._personas.enter(state, chosen, stats)
                    memory, region = self.memory.turn(state, message, memory_scope, stats, engine)
                    reply = self._runner.turn(state, message, stats, t0, generate_kwargs, memory, region)
                    if store_head:
                        self._personas.snapshot(state, stats)
                    self._save(state, reply)
                    log_turn(self.log, engine, state, reply)
                    held = self.memory.turn_done(engine, state, message, reply, memory_scope)
        self.memory.recheck(engine, held, reply)  # outside the locks: forgetting takes them
        return reply

    def _load_under(self, persona: str, name: str) -> None:
        """Load session ``name`` from the store of the weights persona ``persona`` runs under
        (a persona's turns are saved under its adapter's fingerprint)."""
        engine = self._engine
        with engine.preemption.foreground(engine.lock), self._personas.applied(persona):
            engine.follow_model()
            with contextlib.suppress(UnknownSession):
                self.get(name)

    def _follow_weights(self, session: Session) -> None:
        """Compute the history again when the weights changed (:func:`.transitions.follow_weights`)."""
        follow_weights(session, self._engine.follow_model())

    def _save(self, session: Session, reply: Reply) -> None:
        """Append the turn to the store (best effort: a failed write keeps the reply, counts
        in ``stats.store_errors`` and makes the next save rewrite from the last good point)."""
        if self._store is None:
            return
        try:
            self._store.save(session, session.rewrite)
            session.rewrite = False
        except (OSError, sqlite3.Error) as exc:
            reply.stats.store_errors += 1
            session.rewrite = True
            log.warning("percache: could not save session %r: %s", session.name, exc)
            return
        failed = self._engine.hooks.session_saved(self._engine.ctx, session, reply.turn_id)
        reply.stats.plugin_errors += failed  # an observer: logged, the reply is kept
        self._engine.stats().plugin_errors += failed
