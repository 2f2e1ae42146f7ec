"""A lean list + watch of one kind into a keyed store, for the kinds whose events are many.

kopf turns every watch event into a handling cycle: a per-object memory, a body wrapper, three
loggers, index and cause detection, each handler run as a task under a timeout. Measured with
cProfile on the scale benchmark, that machinery was about three quarters of the operator's CPU,
while the views it feeds cost a few percent. Pods and the operator's batch Jobs bring about six
events per admitted job, none of which needs a handler's retries or progress: they only update
what the scheduler sees. :class:`Informer` does just that, as client-go's informers do:

- it lists in pages, then watches from the list's resourceVersion with bookmarks, reconnecting
  when the server ends the watch, and lists again on ``410 Gone`` (or any error, after a backoff);
- each listing is compared with the store, so an object deleted while the watch was down is
  reported as deleted (kopf's re-listing does not notice those);
- the stream is read and parsed in one thread (a plain ``urllib3`` response of the Kubernetes
  client), and the views it makes are handed to the event loop in batches, where the store and
  the index are changed and ``on_change(key, before, after)`` is called: everything the
  scheduler reads changes on the loop's thread only;
- ``server_filter`` is a label selector the API server applies (the operator's batch Jobs), so
  the others' objects never cross the wire;
- with ``drop_unchanged``, an event whose view equals the one last handed over for its object
  (a node's heartbeat, a pod's status change the view does not hold) is dropped in the thread and
  counted (``unchanged``): it costs its parse and one comparison, and never wakes the loop.

``view`` turns a raw object into what is kept (``None``: not kept); ``keys`` names the index
entries a view appears under (a pod: its node and its job), like a kopf index function's keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from kubernetes import client

log = logging.getLogger(__name__)

V = TypeVar("V")
ObjKey = tuple[str, str]

PAGE = 500  # objects per page of a listing


class Gone(Exception):
    """The resourceVersion is too old (410): list again."""


class Index(Mapping[Hashable, Iterable[Any]], Generic[V]):
    """Index key → the views filed under it (read as kopf's indexes are: ``get(key, ())``)."""

    def __init__(self) -> None:
        self._buckets: dict[Hashable, dict[ObjKey, V]] = {}

    def __getitem__(self, key: Hashable) -> Iterable[V]:
        return self._buckets[key].values()

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._buckets)

    def __len__(self) -> int:
        return len(self._buckets)

    def _file(self, obj: ObjKey, keys: Iterable[Hashable], view: V) -> None:
        for key in keys:
            self._buckets.setdefault(key, {})[obj] = view

    def _unfile(self, obj: ObjKey, keys: Iterable[Hashable]) -> None:
        for key in keys:
            bucket = self._buckets.get(key)
            if bucket is not None:
                bucket.pop(obj, None)
                if not bucket:
                    del self._buckets[key]


class Informer(Generic[V]):
    def __init__(
        self,
        name: str,
        api: client.ApiClient,
        group_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        shared: tuple[dict[ObjKey, V], Index[V]] | None = None,
        view: Callable[[Mapping[str, Any]], V | None],
        keys: Callable[[ObjKey, V], Iterable[Hashable]],
        on_change: Callable[[ObjKey, V | None, V | None], None],
        server_filter: str | None = None,
        timeout_seconds: int = 300,
        backoff_seconds: float = 1.0,
        kind: str | None = None,
        drop_unchanged: bool = False,
    ) -> None:
        self.name = name
        self.kind = kind or name  # what the metrics call it: the informers of one kind share it
        self.api = api
        root = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        self.path = f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"
        self.namespace = namespace
        self.view = view
        self.keys = keys
        self.on_change = on_change
        self.server_filter = server_filter
        self.timeout_seconds = timeout_seconds
        self.backoff_seconds = backoff_seconds
        # Informers of one kind in several namespaces share one store and index; each listing
        # then stands only for its own namespace.
        self.store: dict[ObjKey, V] = shared[0] if shared else {}
        self.index: Index[V] = shared[1] if shared else Index()
        self.listed = False  # the first listing is in the store
        self.events = 0
        self.relists = 0
        # Views that would not change the store, dropped in the thread (``drop_unchanged``): the
        # thread's own record of the last view it handed over per object (the store is the loop's).
        self.drop_unchanged = drop_unchanged
        self.unchanged = 0
        self._sent: dict[ObjKey, V] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._response: Any = None

    # --- on the event loop ------------------------------------------------------------------

    def start(self) -> None:
        """Start (or, after ``stop``, restart) the watch thread; the store is kept, so the first
        listing reports what went while stopped."""
        if self._thread is not None:
            self._thread.join(timeout=10)  # a stopped thread leaves at its next read
        self._stop.clear()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=f"accel-watch-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:
            with contextlib.suppress(Exception):  # whatever state the connection is in, it ends
                resp.shutdown()

    def apply(self, changes: list[tuple[ObjKey, V | None]], *, listing: set[ObjKey] | None = None) -> None:
        """Put ``changes`` (a view, or None for a deletion) in the store; after a listing, what
        it did not hold is deleted. Calls ``on_change`` for each object that changed."""
        if listing is not None:
            mine = (lambda key: key[0] == self.namespace) if self.namespace else (lambda key: True)
            changes = changes + [(key, None) for key in self.store if key not in listing and mine(key)]
        for key, after in changes:
            before = self.store.get(key)
            if before is None and after is None:
                continue
            if before is not None:
                self.index._unfile(key, self.keys(key, before))
                del self.store[key]
            if after is not None:
                self.store[key] = after
                self.index._file(key, self.keys(key, after), after)
            if before != after:
                self.on_change(key, before, after)
        if listing is not None:
            self.listed = True

    # --- in the thread ----------------------------------------------------------------------

    def _hand(self, changes: list[tuple[ObjKey, V | None]], listing: set[ObjKey] | None = None) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or self._stop.is_set():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
            loop.call_soon_threadsafe(lambda: self.apply(changes, listing=listing))

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._list()
                failures = 0
                while not self._stop.is_set():
                    version = self._watch(version)
            except Gone:
                self.relists += 1
                log.debug("%s: resourceVersion too old; listing again", self.name)
            except Exception as exc:  # noqa: BLE001 - any failure: back off, list again (never stop watching)
                if self._stop.is_set():
                    return
                self.relists += 1
                failures += 1
                delay = min(self.backoff_seconds * 2 ** min(failures - 1, 5), 30.0)  # 1, 2, 4 ... 30 s
                log.warning("%s watch failed (%s); listing again in %.0f s", self.name, str(exc)[:200], delay)
                self._stop.wait(delay)

    def _get(self, query: dict[str, Any], *, stream: bool) -> Any:
        params = [(k, v) for k, v in query.items() if v is not None]
        if self.server_filter:
            params.append(("labelSelector", self.server_filter))
        method, url, headers, _body, _post = self.api.param_serialize(
            "GET", self.path, query_params=params, auth_settings=["BearerToken"]
        )
        timeout = (10.0, self.timeout_seconds + 30.0) if stream else 60.0
        resp = self.api.call_api(method, url, header_params=headers, _request_timeout=timeout)
        if resp.status == 410:
            raise Gone()
        if resp.status >= 400:
            resp.read()
            raise client.ApiException(status=resp.status, reason=str(resp.reason))
        return resp

    def _list(self) -> str:
        changes: list[tuple[ObjKey, V | None]] = []
        seen: set[ObjKey] = set()
        token: str | None = None
        while True:
            resp = self._get({"limit": PAGE, "continue": token}, stream=False)
            resp.read()
            page = json.loads(resp.data)
            for obj in page.get("items") or ():
                key = _key(obj)
                view = self.view(obj)
                if view is not None:
                    seen.add(key)
                    changes.append((key, view))
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                if self.drop_unchanged:
                    # What the store holds once the listing is applied.
                    self._sent = {key: view for key, view in changes if view is not None}
                self._hand(changes, listing=seen)
                return str(meta.get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        """One watch call from ``version`` until the server ends it; the last version seen."""
        resp = self._get(
            {
                "watch": "true",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": self.timeout_seconds,
            },
            stream=True,
        )
        raw = resp.response  # the urllib3 response, read as it streams
        self._response = raw
        try:
            for lines in _chunks(raw):
                batch: list[tuple[ObjKey, V | None]] = []
                for line in lines:
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise Gone()
                        raise client.ApiException(status=obj.get("code"), reason=str(obj.get("message"))[:200])
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if kind == "BOOKMARK":
                        continue
                    self.events += 1
                    key, view = _key(obj), None if kind == "DELETED" else self.view(obj)
                    if self.drop_unchanged:
                        if view == self._sent.get(key):  # a heartbeat (or an object never kept)
                            self.unchanged += 1
                            continue
                        if view is None:
                            self._sent.pop(key, None)
                        else:
                            self._sent[key] = view
                    batch.append((key, view))
                if batch:  # what one read brought: at once, never held for a later event
                    self._hand(batch)
        finally:
            self._response = None
            raw.release_conn()
        return version


def by_name(key: ObjKey, _view: object) -> list[Hashable]:
    """``keys`` for an index by (namespace, name) alone."""
    return [key]


def _key(obj: Mapping[str, Any]) -> ObjKey:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _chunks(raw: Any) -> Iterator[list[bytes]]:
    """The whole lines each read of a streamed response brings (a read may end inside a line)."""
    rest = b""
    for chunk in raw.stream(256 * 1024, decode_content=True):
        rest += chunk
        *lines, rest = rest.split(b"\n")
        if lines:
            yield [line for line in lines if line.strip()]
    if rest.strip():
        yield [rest]


def stats(informers: Iterable[Informer[Any]]) -> Iterator[tuple[str, int, int, bool, int]]:
    """(kind, events, relists, listed, unchanged) of ``informers``, the informers of one kind
    summed: what ``metrics.WatchStats`` exports."""
    kinds: dict[str, tuple[int, int, bool, int]] = {}
    for i in informers:
        events, relists, listed, unchanged = kinds.get(i.kind, (0, 0, True, 0))
        kinds[i.kind] = (events + i.events, relists + i.relists, listed and i.listed, unchanged + i.unchanged)
    for kind, (events, relists, listed, unchanged) in sorted(kinds.items()):
        yield kind, events, relists, listed, unchanged
