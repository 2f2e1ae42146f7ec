"""KWOK stage configuration: how simulated nodes and their pods change state.

Nodes become Ready and keep their leases; pods bound to KWOK nodes become Running and stay
Running (KWOK's default would complete every Job pod at once). A test ends a pod by annotating
it: ``accel.dev/simulate-exit-code: "0"`` makes it Succeeded, any other code Failed with that
exit code. A pod being deleted ends Failed, as the kubelet ends it (its phase turns terminal
before the object goes, which the Job controller waits for), and is then removed — once no
finalizer holds it: the operator keeps its own pods until its cost ledger holds their times
(``accel.dev/ledger``), which KWOK's own delete stage would not wait for.

The node and pod-ready stages are KWOK's own, read from the kwok module that
hack/localcluster/build.sh downloaded, so they always match the kwok binary.
"""

import subprocess
from pathlib import Path

from accel_api import vocabulary

KWOK_VERSION = "v0.8.0"
EXIT_CODE_ANNOTATION = vocabulary.ANNOTATION_SIM_EXIT_CODE
_UPSTREAM = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
)


# Every stage of ours acts on pods; a stage is its name, the expressions its selector matches and
# what comes next (a status template, or the deletion).
def _stage(name: str, match: list[tuple[str, str, list[str] | None]], next_: str) -> str:
    exprs = "".join(
        f"    - key: '{key}'\n      operator: '{op}'\n" + (f"      values: {values!r}\n" if values is not None else "")
        for key, op, values in match
    )
    return (
        "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n"
        f"  name: accel-pod-{name}\n"
        "spec:\n  resourceRef:\n    apiGroup: v1\n    kind: Pod\n  selector:\n    matchExpressions:\n"
        f"{exprs}  next:\n{next_}"
    )


# Each container terminated now with ``code`` (a Go template expression) for ``reason``.
def _terminated(code: str, reason: str) -> str:
    return f"""      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {code}
            finishedAt: {{{{ $now | Quote }}}}
            reason: {reason}
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
"""


_DELETING = (".metadata.deletionTimestamp", "Exists", None)

# A pod being deleted: first its containers killed, as the kubelet kills them (terminated, exit
# code 137, finishedAt now: the time the pod's run ended, which a later shorter-grace delete,
# e.g. the pod garbage collector's once the node is gone, does not move), and a terminal phase;
# then the deletion, which the API server completes once its finalizers are gone. Its conditions
# are left as they are (a DisruptionTarget the eviction set decides the batch Job's rule).
_TERMINATE = _stage(
    "terminate",
    [_DELETING, (".status.phase", "In", ["Pending", "Running"])],
    "    statusTemplate: |\n      {{ $now := Now }}\n" + _terminated("137", "Error") + "      phase: Failed\n",
)
_DELETE = _stage("delete", [_DELETING, (".status.phase", "In", ["Succeeded", "Failed"])], "    delete: true\n")


# A running pod the test annotated with an exit code ends with it: Succeeded for 0, else Failed.
def _exit(name: str, operator: str, reason: str, phase: str) -> str:
    code = f'.metadata.annotations["{EXIT_CODE_ANNOTATION}"]'
    completed = "".join(
        f"""      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: {kind}
        reason: PodCompleted
"""
        for kind in ("Ready", "ContainersReady")
    )
    template = (
        "    statusTemplate: |\n      {{ $now := Now }}\n"
        f'      {{{{ $code := index .metadata.annotations "{EXIT_CODE_ANNOTATION}" }}}}\n'
        f"      conditions:\n{completed}" + _terminated("{{ $code }}", reason) + f"      phase: {phase}\n"
    )
    match = [
        (".metadata.deletionTimestamp", "DoesNotExist", None),
        (".status.phase", "In", ["Running"]),
        (code, operator, ["0"]),
        (code, "Exists", None),
    ]
    return _stage(name, match, template)


def _kwok_module() -> Path:
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    return Path(cache) / f"sigs.k8s.io/kwok@{KWOK_VERSION}" / "kustomize" / "stage"


def render() -> str:
    base = _kwok_module()
    docs = [(base / rel).read_text().strip() for rel in _UPSTREAM]
    docs += [_TERMINATE.strip(), _DELETE.strip()]
    docs.append(_exit("succeed", "In", "Completed", "Succeeded").strip())
    docs.append(_exit("fail", "NotIn", "Error", "Failed").strip())
    return "\n---\n".join(docs) + "\n"
