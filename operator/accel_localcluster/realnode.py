"""One real node beside the KWOK nodes: containerd and runc (Debian packages), a CNI bridge (the
Debian CNI plugins) and a kubelet built from the same Kubernetes module as the API server.

Accelerator jobs still land on KWOK nodes; this node runs what must really run: the operator (and
whatever else is installed with the chart) from the images ``hack/images.sh`` builds, imported
into containerd (``import_image``). It needs root.

What this machine asked for, and why (each found by running it):

- ``restrict_oom_score_adj``: the kubelet asks for a pod sandbox at oom_score_adj -998, which a
  process without CAP_SYS_RESOURCE may not set (runc's nsexec fails: "failed to update
  /proc/self/oom_score_adj: Permission denied"); containerd then keeps every score at or above its
  own, as it does when rootless.
- ``failCgroupV1: false``: this machine has cgroup v1, which the kubelet refuses unless told.
- The sandbox image is ``registry.k8s.io/pause:3.10`` by name (containerd's default), built here
  from ``hack/localcluster/pause`` (a Go program that waits for SIGTERM) with umoci, since no
  registry is reachable.
- kube-proxy (iptables mode, built from the same module) leads Service ClusterIPs to their
  endpoints for the node's pods: the ``kubernetes`` Service's endpoint is the bridge's gateway,
  where the API server listens when the cluster runs with ``pod_network`` (control_plane). So pods
  use in-cluster config as anywhere else, and two operator replicas have addresses of their own.
  ``conntrack.maxPerCore: 0`` leaves the host's conntrack table size alone. Stopping the node
  removes kube-proxy's rules (``kube-proxy --cleanup``). One real node per machine: the bridge and
  the rules are the host's.
- The API server still calls webhooks at their endpoints' addresses (``--enable-aggregator-routing``):
  the host reaches the pods on the bridge directly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from accel_localcluster.control_plane import POD_CIDR

NODE_NAME = "accel-real-0"
PAUSE_REF = "registry.k8s.io/pause:3.10"
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI
PACKAGES = ("containerd", "runc", "umoci", "containernetworking-plugins")  # Debian's


@dataclass(frozen=True)
class RealNode:
    state: Path  # the cluster's state folder: everything of the node lives under state/realnode
    bin: Path  # the local cluster's binaries (kubelet, pause)
    kubeconfig: Path
    kubelet_port: int

    @property
    def home(self) -> Path:
        return self.state / "realnode"

    @property
    def socket(self) -> Path:
        return self.home / "containerd.sock"

    def _pid(self, name: str) -> int | None:
        try:
            pid = int((self.home / f"{name}.pid").read_text())
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None
        return pid

    def _spawn(self, name: str, args: list[str]) -> None:
        if self._pid(name) is not None:
            return
        log = (self.home / f"{name}.log").open("ab")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (self.home / f"{name}.pid").write_text(str(proc.pid))

    def _write_configs(self) -> None:
        h = self.home
        (h / "cni").mkdir(parents=True, exist_ok=True)
        (h / "containerd.toml").write_text(
            f"""version = 2
root = "{h}/containerd-root"
state = "{h}/containerd-state"
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_REF}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{h}/cni"
"""
        )
        bridge = {
            "cniVersion": "1.0.0",
            "name": "accel",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "accel0",
                    "isGateway": True,
                    "ipMasq": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
                {"type": "loopback"},
            ],
        }
        (h / "cni" / "10-accel.conflist").write_text(json.dumps(bridge))
        (h / "kubelet.yaml").write_text(
            json.dumps(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "failCgroupV1": False,
                    "failSwapOn": False,
                    "cgroupDriver": "cgroupfs",
                    "port": self.kubelet_port,
                    "readOnlyPort": 0,
                    "healthzPort": 0,
                    "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
                    "authorization": {"mode": "AlwaysAllow"},
                    "evictionHard": {"memory.available": "1%", "nodefs.available": "1%", "imagefs.available": "1%"},
                    "enforceNodeAllocatable": [],
                    "localStorageCapacityIsolation": False,
                    "registerWithTaints": [],
                }
            )
        )

    def _write_proxy_config(self) -> Path:
        path = self.home / "kube-proxy.yaml"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "clientConnection": {"kubeconfig": str(self.kubeconfig)},
                    "mode": "iptables",
                    "clusterCIDR": POD_CIDR,
                    "hostnameOverride": NODE_NAME,
                    "healthzBindAddress": f"127.0.0.1:{self.kubelet_port + 1}",
                    "metricsBindAddress": f"127.0.0.1:{self.kubelet_port + 2}",
                    "conntrack": {"maxPerCore": 0},
                    "iptables": {"localhostNodePorts": False},
                }
            )
        )
        return path

    def _ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "-n", NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _wait_containerd(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ctr("version", timeout=10).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"containerd did not answer on {self.socket} (see {self.home / 'containerd.log'})")

    def _pause_archive(self) -> Path:
        """The sandbox image as an OCI archive, made once with umoci from the pause binary."""
        out = self.home / "pause.oci.tar"
        if out.is_file() and out.stat().st_mtime >= (self.bin / "pause").stat().st_mtime:
            return out
        with tempfile.TemporaryDirectory(dir=self.home) as tmp:
            t = Path(tmp)

            def umoci(*args: str) -> None:
                subprocess.run(["umoci", *args], check=True, capture_output=True, timeout=120)

            umoci("init", "--layout", str(t / "layout"))
            umoci("new", "--image", f"{t / 'layout'}:3.10")
            umoci("unpack", "--image", f"{t / 'layout'}:3.10", str(t / "bundle"))
            shutil.copy2(self.bin / "pause", t / "bundle" / "rootfs" / "pause")
            umoci("repack", "--image", f"{t / 'layout'}:3.10", str(t / "bundle"))
            umoci("config", "--image", f"{t / 'layout'}:3.10", "--config.entrypoint", "/pause")
            subprocess.run(["tar", "-cf", str(out), "-C", str(t / "layout"), "."], check=True, timeout=60)
        return out

    def import_image(self, archive: Path, name: str) -> str:
        """Import an OCI archive whose ref name is the tag as ``name:<tag>`` (the CRI's names are
        normalised: a bare name is ``docker.io/library/<name>``). Returns ``name:<tag>``."""
        base = name if "/" in name else f"docker.io/library/{name}"
        done = self._ctr("images", "import", "--base-name", base, str(archive))
        if done.returncode != 0:
            raise RuntimeError(f"ctr images import {archive.name}: {done.stderr.strip()[-500:]}")
        tag = archive.name.removeprefix(f"{name}-").removesuffix(".oci.tar")
        return f"{name}:{tag}"

    def up(self, timeout: float = 120) -> None:
        """containerd, the sandbox image, the kubelet and kube-proxy; returns once the node is Ready
        and kube-proxy has synced."""
        for tool in ("containerd", "ctr", "runc", "umoci"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is missing (Debian: apt-get install {' '.join(PACKAGES)})")
        if not Path("/usr/lib/cni/bridge").is_file():
            raise RuntimeError("the CNI plugins are missing (Debian: apt-get install containernetworking-plugins)")
        self.home.mkdir(parents=True, exist_ok=True)
        self._write_configs()
        self._spawn("containerd", ["containerd", "--config", str(self.home / "containerd.toml")])
        self._wait_containerd()
        base = PAUSE_REF.rsplit(":", 1)[0]
        done = self._ctr("images", "import", "--base-name", base, str(self._pause_archive()))
        if done.returncode != 0:
            raise RuntimeError(f"importing the pause image: {done.stderr.strip()[-500:]}")
        self._spawn(
            "kubelet",
            [
                str(self.bin / "kubelet"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={self.home / 'kubelet.yaml'}",
                f"--container-runtime-endpoint=unix://{self.socket}",
                f"--root-dir={self.home / 'kubelet'}",
                f"--cert-dir={self.home / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                "--v=1",
            ],
        )
        self._spawn("kube-proxy", [str(self.bin / "kube-proxy"), f"--config={self._write_proxy_config()}", "--v=1"])
        self._wait_ready(timeout)
        self._wait_proxy(timeout)

    def _wait_proxy(self, timeout: float) -> None:
        """kube-proxy's healthz answers 200 once it has synced its rules."""
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.kubelet_port + 1}/healthz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=3) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if self._pid("kube-proxy") is None:
                break
            time.sleep(1)
        raise RuntimeError(f"kube-proxy not healthy in {timeout:.0f}s (see {self.home / 'kube-proxy.log'})")

    def _wait_ready(self, timeout: float) -> None:
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                node = api.read_node(NODE_NAME)
                if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
                    return
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
            time.sleep(1)
        raise RuntimeError(f"node {NODE_NAME} not Ready in {timeout:.0f}s (see {self.home / 'kubelet.log'})")

    def down(self) -> None:
        """Stop the kubelet, then every pod sandbox and containerd (the node object stays)."""
        for name in ("kube-proxy", "kubelet", "containerd"):
            pid = self._pid(name)
            if pid is None:
                continue
            if name == "containerd":
                tasks = self._ctr("tasks", "ls", "-q", timeout=30).stdout.split()
                for task in tasks:
                    self._ctr("tasks", "kill", "-s", "SIGKILL", task, timeout=30)
            os.killpg(pid, signal.SIGTERM)
            for _ in range(100):
                if self._pid(name) is None:
                    break
                time.sleep(0.1)
            (self.home / f"{name}.pid").unlink(missing_ok=True)
        if (self.bin / "kube-proxy").is_file():
            # Its chains stay in the host's tables after it stops: remove them.
            subprocess.run([str(self.bin / "kube-proxy"), "--cleanup"], capture_output=True, timeout=60, check=False)
        self._unmount()

    def _unmount(self) -> None:
        """The mounts the kubelet and containerd left under the node's folder (the pods' volumes,
        their sandboxes' shm and root filesystems), deepest first, so the folder can be removed."""
        prefix = f"{self.home}/"
        with Path("/proc/self/mounts").open(encoding="utf-8") as mounts:
            points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
        for point in sorted(set(points), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30, check=False)
