"""Starts, checks and stops the local control plane as ordinary processes.

Each component runs detached (its own session) with a pidfile and a log under the state folder,
so ``up`` in one command and ``down`` in another work, and a crashed test run leaves nothing
behind that the next ``up`` cannot clean. ``up`` is idempotent: a healthy cluster is left alone;
a half-started or stale one is stopped and started again.
"""

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from accel_localcluster import pki as pki_mod
from accel_localcluster import stages

REPO = Path(__file__).resolve().parents[2]

# Client settings of the controller manager and the scheduler (see _kcm_args), and the Job
# controller's workers. KWOK's own client needs none: it is built with an always-allow rate
# limiter (kwok v0.8, pkg/kwok/cmd). Its pod stages play 4 at a time; a KwokConfiguration
# document that raises that must set every parallelism (a zero one stops KWOK): not changed.
CONTROLLER_QPS = 300
CONTROLLER_BURST = 600
JOB_SYNCS = 20
# The real node's pod network (realnode's CNI bridge): its gateway is the host's address there.
POD_CIDR = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"


class ClusterError(RuntimeError):
    """The control plane could not be built, started or reached; the message says where to look."""


@dataclass(frozen=True)
class Ports:
    etcd: int = 26379
    etcd_peer: int = 26380
    apiserver: int = 26443
    controller_manager: int = 26457
    scheduler: int = 26459
    kwok: int = 26460

    @classmethod
    def from_base(cls, base: int) -> "Ports":
        """The default ports moved along with the base (26000 gives the defaults): one cluster per base."""
        defaults = cls()
        return cls(**{f.name: getattr(defaults, f.name) + base - 26000 for f in fields(cls)})

    @classmethod
    def from_env(cls) -> "Ports":
        return cls.from_base(int(os.environ.get("ACCEL_CLUSTER_PORT_BASE", "26000")))


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    healthy: bool
    detail: str = ""


@dataclass
class Cluster:
    """One local control plane rooted at ``state`` (default .cache/localcluster/state)."""

    state: Path
    bin: Path
    ports: Ports = field(default_factory=Ports)
    # Pods on the real node (accel_localcluster.realnode) reach the API server through the
    # ``kubernetes`` Service: it then listens on every address and advertises the pod bridge's
    # gateway, which kube-proxy leads the Service's ClusterIP to. KWOK-only clusters keep loopback.
    pod_network: bool = False

    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

    # --- paths ------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def _pidfile(self, name: str) -> Path:
        return self.state / "run" / f"{name}.pid"

    def log(self, name: str) -> Path:
        return self.state / "logs" / f"{name}.log"

    # --- build ------------------------------------------------------------------------------
    def build(self) -> None:
        """Build (or find cached) binaries; a no-op in seconds when nothing changed."""
        script = REPO / "hack" / "localcluster" / "build.sh"
        env = {**os.environ, "ACCEL_CLUSTER_BIN": str(self.bin)}
        proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ClusterError(f"building the control plane failed:\n{proc.stderr[-4000:]}")
        missing = [c for c in (*self.COMPONENTS, "kubectl") if not (self.bin / c).is_file()]
        if missing:
            raise ClusterError(f"build finished but binaries are missing in {self.bin}: {missing}")

    # --- status -----------------------------------------------------------------------------
    def _pid(self, name: str) -> int | None:
        try:
            pid = int(self._pidfile(name).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _ours(pid, self.bin / name) else None

    def _ssl(self, verify: bool) -> ssl.SSLContext:
        p = pki_mod.Pki.at(self.state / "pki")
        ctx = ssl.create_default_context(cafile=str(p.ca_cert)) if verify else ssl._create_unverified_context()
        if verify:
            ctx.load_cert_chain(str(p.admin_cert), str(p.admin_key))
        return ctx

    def _probe(self, name: str) -> tuple[bool, str]:
        try:
            if name == "etcd":
                body = _get(f"http://127.0.0.1:{self.ports.etcd}/health", None)
                return json.loads(body).get("health") == "true", body.strip()
            if name == "kube-apiserver":
                return _get(f"{self.server}/readyz", self._ssl(True)).strip() == "ok", "readyz"
            if name == "kube-controller-manager":
                url = f"https://127.0.0.1:{self.ports.controller_manager}/healthz"
                return _get(url, self._ssl(False)).strip() == "ok", "healthz"
            if name == "kube-scheduler":
                url = f"https://127.0.0.1:{self.ports.scheduler}/healthz"
                return _get(url, self._ssl(False)).strip() == "ok", "healthz"
            if name == "kwok":
                return _get(f"http://127.0.0.1:{self.ports.kwok}/healthz", None).strip() == "ok", "healthz"
        except (OSError, urllib.error.URLError, ValueError) as exc:
            return False, str(exc)
        return False, "unknown component"

    def status(self) -> list[ComponentStatus]:
        out = []
        for name in self.COMPONENTS:
            pid = self._pid(name)
            healthy, detail = self._probe(name) if pid else (False, "not running")
            out.append(ComponentStatus(name, pid, pid is not None, healthy, detail))
        return out

    def healthy(self) -> bool:
        return self.kubeconfig.is_file() and all(s.healthy for s in self.status())

    # --- up / down --------------------------------------------------------------------------
    def up(self, *, build: bool = True, timeout: float = 180.0) -> None:
        """Start everything (building first); leave a healthy cluster alone."""
        if build:
            self.build()
        if self.healthy() and self._mode() == self._wanted_mode():
            return
        self.down(wipe=True)
        for sub in ("run", "logs"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        (self.state / "etcd").mkdir(mode=0o700, exist_ok=True)
        self._check_ports_free()
        p = pki_mod.ensure(self.state / "pki")
        self._write_kubeconfig(p)
        stage_file = self.state / "kwok-stages.yaml"
        stage_file.write_text(stages.render())
        deadline = time.monotonic() + timeout
        try:
            self._start("etcd", self._etcd_args())
            self._wait("etcd", deadline)
            self._start("kube-apiserver", self._apiserver_args(p))
            self._wait("kube-apiserver", deadline)
            (self.state / "run" / "apiserver.mode").write_text(self._wanted_mode())
            self._start("kube-controller-manager", self._kcm_args(p))
            self._start("kube-scheduler", self._scheduler_args())
            self._start("kwok", self._kwok_args(stage_file))
            for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
                self._wait(name, deadline)
        except BaseException:
            self.down(wipe=True)  # never leave half a cluster behind; the logs stay
            raise

    def down(self, *, wipe: bool = True) -> list[str]:
        """Stop every component this state folder started; with ``wipe``, drop etcd's data."""
        stopped = []
        for name in reversed(self.COMPONENTS):
            # Also strays whose pidfile was lost (a wiped state folder, a crash), but only those
            # started for this state folder: another cluster may share the binaries (ACCEL_CLUSTER_BIN).
            pids = {p for p in (self._pid(name),) if p is not None} | _running(self.bin / name, self.state)
            for pid in pids:
                _terminate(pid)
            if pids:
                stopped.append(name)
            self._pidfile(name).unlink(missing_ok=True)
        if wipe:
            subprocess.run(["rm", "-rf", str(self.state / "etcd")], check=False)
        return stopped

    def restart_apiserver(self, *, down_seconds: float = 0.0, timeout: float = 120.0) -> None:
        """Stop the API server (SIGTERM, then SIGKILL), wait ``down_seconds``, start it again with
        the same arguments and wait until it is ready: what an API server upgrade or crash does to
        its clients (the soak bench). etcd keeps the objects; every watch breaks."""
        pid = self._pid("kube-apiserver")
        if pid is not None:
            _terminate(pid)
        time.sleep(down_seconds)
        self._start("kube-apiserver", self._apiserver_args(pki_mod.ensure(self.state / "pki")))
        self._wait("kube-apiserver", time.monotonic() + timeout)

    # --- internals --------------------------------------------------------------------------
    def _check_ports_free(self) -> None:
        busy = []
        for name, port in vars(self.ports).items():
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    busy.append(f"{name}:{port}")
        if busy:
            raise ClusterError(
                f"ports in use by something this cluster did not start: {', '.join(busy)}; stop it, or set "
                "ACCEL_CLUSTER_PORT_BASE to another base (default 26000)"
            )

    def _start(self, name: str, args: list[str]) -> None:
        log = self.log(name).open("wb")  # one start per log: old errors do not linger
        proc = subprocess.Popen(
            [str(self.bin / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.state,
        )
        self._pidfile(name).write_text(str(proc.pid))

    def _wait(self, name: str, deadline: float) -> None:
        detail = ""
        while time.monotonic() < deadline:
            if self._pid(name) is None:
                break
            ok, detail = self._probe(name)
            if ok:
                return
            time.sleep(0.3)
        tail = self.log(name).read_text(errors="replace")[-3000:] if self.log(name).is_file() else ""
        raise ClusterError(f"{name} did not become healthy ({detail}); log {self.log(name)}:\n{tail}")

    def _etcd_args(self) -> list[str]:
        pp = self.ports
        return [
            "--name=accel-local",
            f"--data-dir={self.state / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{pp.etcd}",
            f"--advertise-client-urls=http://127.0.0.1:{pp.etcd}",
            f"--listen-peer-urls=http://127.0.0.1:{pp.etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{pp.etcd_peer}",
            f"--initial-cluster=accel-local=http://127.0.0.1:{pp.etcd_peer}",
            # A throwaway test store: no fsync keeps the 2-core machine responsive.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ]

    def _wanted_mode(self) -> str:
        return "pod-network" if self.pod_network else "loopback"

    def _mode(self) -> str:
        """How the running API server was started (a cluster started for KWOK alone is restarted
        when the real node needs it on the pod network)."""
        try:
            return (self.state / "run" / "apiserver.mode").read_text().strip()
        except OSError:
            return "loopback"

    def _apiserver_args(self, p: pki_mod.Pki) -> list[str]:
        if self.pod_network:
            # The lease reconciler keeps the `kubernetes` Service's endpoints at the advertised
            # address; with loopback it has nothing valid to write (Endpoints refuse 127.0.0.0/8).
            listen = [
                "--bind-address=0.0.0.0",
                f"--advertise-address={POD_GATEWAY}",
                "--endpoint-reconciler-type=lease",
            ]
        else:
            listen = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]
        return [
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd}",
            f"--secure-port={self.ports.apiserver}",
            *listen,
            f"--tls-cert-file={p.server_cert}",
            f"--tls-private-key-file={p.server_key}",
            f"--client-ca-file={p.ca_cert}",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            # Webhooks and aggregated APIs behind a Service are called at its endpoints' addresses:
            # kube-proxy runs only with the real node (and its rules lead pods, not the host
            # processes' sockets bound to loopback), so a Service's ClusterIP is not for the API server.
            "--enable-aggregator-routing=true",
            "--v=1",
            # Front-proxy CA: without it every delegating component logs a missing-bundle error.
            f"--requestheader-client-ca-file={p.ca_cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        ]

    def _controller_args(self, port: int) -> list[str]:
        """What the controller-manager and the scheduler share: the admin kubeconfig for the API
        and for delegated authn/authz, no leader election, health served on loopback."""
        k = str(self.kubeconfig)
        return [
            f"--kubeconfig={k}",
            f"--authentication-kubeconfig={k}",
            f"--authorization-kubeconfig={k}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--v=1",
        ]

    def _kcm_args(self, p: pki_mod.Pki) -> list[str]:
        return [
            *self._controller_args(self.ports.controller_manager),
            f"--service-account-private-key-file={p.sa_key}",
            f"--root-ca-file={p.ca_cert}",
            f"--cluster-signing-cert-file={p.ca_cert}",
            f"--cluster-signing-key-file={p.ca_key}",
            "--use-service-account-credentials=false",
            "--controllers=*,-nodeipam,-service-lb-controller",
            # React quickly to nodes that disappear or stop reporting (simulated preemption).
            "--node-monitor-grace-period=20s",
            "--node-monitor-period=2s",
            # The client's defaults (20 QPS, burst 30) are for small clusters: the Job controller
            # writes a pod, its status and an Event or two per batch Job, so at 20+ admissions a
            # second it falls behind the operator and gangs wait for pods that are not created
            # yet. Operators of large clusters raise these (Kubernetes' own scalability tests run
            # the controller manager at 100+); the local cluster does the same, and gives the Job
            # controller more workers than its 5 (each mostly waits on the API server).
            f"--kube-api-qps={CONTROLLER_QPS}",
            f"--kube-api-burst={CONTROLLER_BURST}",
            f"--concurrent-job-syncs={JOB_SYNCS}",
        ]

    def _scheduler_args(self) -> list[str]:
        # kube-scheduler takes its client settings from a config file (the --kube-api-qps flags are
        # deprecated and ignored once --config is given). Its defaults, 50 QPS and burst 100, bind
        # at most 50 pods a second with nothing left for its Events; raised as for the controller
        # manager. With --config the deprecated --kubeconfig and --leader-elect flags are ignored
        # too, so both are in the file.
        config = self.state / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(self.kubeconfig),
                        "qps": CONTROLLER_QPS,
                        "burst": CONTROLLER_BURST,
                    },
                    "leaderElection": {"leaderElect": False},
                },
                sort_keys=False,
            )
        )
        k = str(self.kubeconfig)
        return [
            f"--config={config}",
            f"--authentication-kubeconfig={k}",
            f"--authorization-kubeconfig={k}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.scheduler}",
            "--v=1",
        ]

    def _kwok_args(self, stage_file: Path) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--config={stage_file}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--cidr=10.244.0.0/16",
            "--node-ip=10.240.0.1",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{self.ports.kwok}",
        ]

    def _write_kubeconfig(self, p: pki_mod.Pki) -> None:
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "accel-local",
            "preferences": {},
            "clusters": [
                {
                    "name": "accel-local",
                    "cluster": {"server": self.server, "certificate-authority-data": b64(p.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "accel-admin",
                    "user": {"client-certificate-data": b64(p.admin_cert), "client-key-data": b64(p.admin_key)},
                }
            ],
            "contexts": [{"name": "accel-local", "context": {"cluster": "accel-local", "user": "accel-admin"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)


def default_cluster() -> Cluster:
    cache = Path(os.environ.get("ACCEL_CLUSTER_HOME", REPO / ".cache" / "localcluster"))
    return Cluster(
        state=cache / "state", bin=Path(os.environ.get("ACCEL_CLUSTER_BIN", cache / "bin")), ports=Ports.from_env()
    )


def _get(url: str, ctx: ssl.SSLContext | None) -> str:
    with urllib.request.urlopen(url, timeout=3, context=ctx) as resp:
        body: bytes = resp.read()
    return body.decode()


def _ours(pid: int, binary: Path) -> bool:
    """Whether ``pid`` is alive and runs ``binary`` (a recycled pid is not ours)."""
    try:
        exe = str(Path(f"/proc/{pid}/exe").readlink())
    except OSError:
        return False
    return exe.removesuffix(" (deleted)") == str(binary)


def _running(binary: Path, state: Path) -> set[int]:
    """Pids of live processes running ``binary`` with an argument under ``state`` (each component
    is started with its state folder's kubeconfig, certificates or data directory)."""
    found = set()
    prefix = str(state).rstrip("/") + "/"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _ours(int(entry.name), binary) and _mentions(int(entry.name), prefix):
            found.add(int(entry.name))
    return found


def _mentions(pid: int, prefix: str) -> bool:
    """Whether one of ``pid``'s arguments names a path starting with ``prefix``."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(prefix in arg.decode(errors="replace") for arg in args)


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie child of ours is reaped and counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def _terminate(pid: int, wait: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after ``wait`` seconds."""
    for sig, limit in ((signal.SIGTERM, wait), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if not _alive(pid):
                return
            time.sleep(0.1)
