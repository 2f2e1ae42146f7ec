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

# A pod being deleted: first its containers killed, as the kubelet kills them (terminated, exit
# code 137, finishedAt now: the time the pod's run ended, which a later shorter-grace delete,
# e.g. the pod garbage collector's once the node is gone, does not move), and a terminal phase;
# then the deletion, which the API server completes once its finalizers are gone. Its conditions
# are left as they are (a DisruptionTarget the eviction set decides the batch Job's rule).
_DELETE = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: accel-pod-terminate
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending', 'Running']
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 137
            finishedAt: {{ $now | Quote }}
            reason: Error
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: accel-pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'In'
      values: ['Succeeded', 'Failed']
  next:
    delete: true
"""

_EXIT = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: accel-pod-{name}
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["{annotation}"]'
      operator: '{operator}'
      values: ['0']
    - key: '.metadata.annotations["{annotation}"]'
      operator: 'Exists'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $code := index .metadata.annotations "{annotation}" }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: Ready
        reason: PodCompleted
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: ContainersReady
        reason: PodCompleted
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{{{ $code }}}}
            finishedAt: {{{{ $now | Quote }}}}
            reason: {reason}
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {phase}
"""


def _kwok_module() -> Path:
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    return Path(cache) / f"sigs.k8s.io/kwok@{KWOK_VERSION}" / "kustomize" / "stage"


def render() -> str:
    base = _kwok_module()
    docs = [(base / rel).read_text().strip() for rel in _UPSTREAM]
    docs.append(_DELETE.strip())
    docs.append(
        _EXIT.format(
            name="succeed", annotation=EXIT_CODE_ANNOTATION, operator="In", reason="Completed", phase="Succeeded"
        ).strip()
    )
    docs.append(
        _EXIT.format(
            name="fail", annotation=EXIT_CODE_ANNOTATION, operator="NotIn", reason="Error", phase="Failed"
        ).strip()
    )
    return "\n---\n".join(docs) + "\n"
