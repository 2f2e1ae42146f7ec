"""What the GPU measurement scripts share: the model they build, the training step they time, the
figures they read off the device, the environment they record, and the ``torchrun`` ranks and
launches (relaunched past a configuration that killed one) of the distributed ones.

``measure_training.py``, ``measure_distributed.py`` and ``measure_pipeline.py`` import this as
``bench.gpu.common`` (each puts the repository root on ``sys.path``, so ``python
bench/gpu/<script>.py`` still runs from anywhere). Like them it needs no ``torch`` or
``transformers`` to import: both are passed in, untyped, by the caller.
"""

from __future__ import annotations

import datetime
import gc
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Substrings of torch.cuda.get_device_properties().name → the catalog id, first match wins.
CATALOG_IDS = (
    ("H100 80GB", "h100-80gb"),
    ("H200", "h200-141gb"),
    ("B200", "b200"),
    ("A100-SXM4-80GB", "a100-80gb"),
    ("A100 80GB", "a100-80gb"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("A10G", "a10g"),
    ("L4", "l4"),
    ("T4", "t4"),
)

# The model shapes the distributed and pipeline scripts measure (the shared calibration set's):
# name → kind, hidden, layers, heads, kv_heads, inter, vocab.
SHAPES: dict[str, tuple[str, int, int, int, int, int, int]] = {
    "llama-125m": ("llama", 768, 12, 12, 12, 2048, 32000),
    "llama-350m": ("llama", 1024, 24, 16, 16, 2816, 32000),
    "llama-1.1b": ("llama", 2048, 22, 32, 4, 5632, 32000),
    "llama-3b": ("llama", 3200, 26, 32, 32, 8640, 32000),
    "llama-7b": ("llama", 4096, 32, 32, 32, 11008, 32000),
    "llama-13b": ("llama", 5120, 40, 40, 40, 13824, 32000),
    "gpt2-124m": ("gpt2", 768, 12, 12, 12, 3072, 50257),
    "gpt2-355m": ("gpt2", 1024, 24, 16, 16, 4096, 50257),
}


@dataclass(frozen=True)
class ModelShape:
    """The decoder a measurement builds, as the scripts name it (what :func:`shape_fields` and
    :func:`hf_config_of` read); each script's ``Config`` adds its run's own fields after these."""

    name: str
    kind: str  # llama | gpt2
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    inter: int
    vocab: int


def catalog_id(gpu_name: str) -> str | None:
    """The accelerator catalog's id for a CUDA device name, or None for a card it does not list."""
    return next((cid for key, cid in CATALOG_IDS if key in gpu_name), None)


def shape_fields(c: Any) -> dict[str, int]:
    """The model shape of a measurement's config, as every row records it."""
    return {k: int(getattr(c, k)) for k in ("hidden", "layers", "heads", "kv_heads", "inter", "vocab")}


def arch_label(kind: str, n_params: int) -> str:
    """``llama-1.1b``, ``gpt2-124m``: the model family and its size."""
    size = n_params / 1e9
    return f"{kind}-{size:.1f}b" if size >= 1 else f"{kind}-{n_params / 1e6:.0f}m"


def hf_config(
    transformers: Any,
    *,
    kind: str,
    hidden: int,
    inter: int,
    layers: int,
    heads: int,
    kv_heads: int,
    vocab: int,
    positions: int,
    use_cache: bool,
) -> Any:
    """A Hugging Face ``LlamaConfig`` (untied embeddings) or, for ``kind`` gpt2, a ``GPT2Config``
    (which has no separate MLP width or key/value heads)."""
    if kind == "llama":
        return transformers.LlamaConfig(
            hidden_size=hidden,
            intermediate_size=inter,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            vocab_size=vocab,
            max_position_embeddings=positions,
            tie_word_embeddings=False,
            use_cache=use_cache,
        )
    return transformers.GPT2Config(
        n_embd=hidden, n_layer=layers, n_head=heads, vocab_size=vocab, n_positions=positions, use_cache=use_cache
    )


def hf_config_of(transformers: Any, shape: Any, *, kind: str, positions: int, use_cache: bool = False) -> Any:
    """``hf_config`` from a configuration that carries the model's shape as attributes (``hidden``,
    ``inter``, ``layers``, ``heads``, ``kv_heads``, ``vocab``), as each script's ``Config`` does."""
    return hf_config(
        transformers,
        kind=kind,
        hidden=shape.hidden,
        inter=shape.inter,
        layers=shape.layers,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        vocab=shape.vocab,
        positions=positions,
        use_cache=use_cache,
    )


def from_config(torch: Any, transformers: Any, cfg: Any, attn: str = "sdpa") -> Any:
    """A randomly initialised causal LM from ``cfg``, built on the GPU, with the attention ``attn``."""
    with torch.device("cuda"):
        try:
            return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
        except TypeError:  # older signatures: set the implementation on the config
            cfg._attn_implementation = attn
            return transformers.AutoModelForCausalLM.from_config(cfg)


def optimizer(torch: Any, name: str, params: Any) -> Any:
    """``adamw``: fused AdamW; anything else: SGD with momentum (both lr 1e-4)."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    return torch.optim.SGD(params, lr=1e-4, momentum=0.9)


def for_training(model: Any, *, grad_ckpt: bool) -> None:
    """``model`` in training mode, with HF's gradient checkpointing (``use_reentrant=False``) when
    ``grad_ckpt``."""
    model.train()
    if grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def train_step(torch: Any, model: Any, ids: Any, opt: Any, *, autocast: bool) -> Any:
    """One training step on ``ids`` (its own labels): the forward (under bf16 autocast when
    ``autocast``), the backward, the optimizer's step, the gradients dropped; the loss."""
    if autocast:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
    else:
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def timed_steps(
    torch: Any, step: Callable[[], Any], steps: int, *, before: Callable[[int], None] | None = None
) -> tuple[list[float], Any]:
    """Wall seconds of each of ``steps`` calls of ``step``, each timed between two device
    synchronisations (``before(i)`` runs ahead of the first), and what the last call returned."""
    timing, result = timed_steps_host(torch, step, steps, before=before)
    return timing.wall, result


@dataclass(frozen=True)
class StepTimes:
    """Each step's seconds: ``wall`` between two device synchronisations; ``host`` from the step's
    start until ``step()`` returned, before the closing synchronisation (the host's time to issue the
    step's work: close to ``wall`` when the step is host-bound, far under it when the device is the
    bottleneck); ``cpu`` the calling thread's CPU time over the step, synchronisation included (the
    forward and the optimizer's dispatch: autograd runs the backward on a thread of its own);
    ``process`` the CPU time of every thread of the process (the backward's, NCCL's helpers' too)."""

    wall: list[float]
    host: list[float]
    cpu: list[float]
    process: list[float]


def timed_steps_host(
    torch: Any, step: Callable[[], Any], steps: int, *, before: Callable[[int], None] | None = None
) -> tuple[StepTimes, Any]:
    """``timed_steps`` with the host's side of each step: see ``StepTimes``."""
    timing = StepTimes([], [], [], [])
    result = None
    for i in range(steps):
        if before is not None:
            before(i)
        torch.cuda.synchronize()
        c0, p0 = time.thread_time(), time.process_time()
        t0 = time.perf_counter()
        result = step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        timing.wall.append(time.perf_counter() - t0)
        timing.host.append(t1 - t0)
        timing.cpu.append(time.thread_time() - c0)
        timing.process.append(time.process_time() - p0)
    return timing, result


def host_fields(torch: Any) -> dict[str, Any]:
    """Where a row ran: the host's name, its CPU model and count, the driver, and this process's
    card with its PCI bus id (two runs on one kind of machine may land on different hosts)."""
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out: dict[str, Any] = {"hostname": socket.gethostname(), "cpu_model": cpu_model, "cpu_count": os.cpu_count()}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    bus, dev = getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None)
    out["gpu_bus"] = props.name
    if isinstance(bus, int) and isinstance(dev, int):
        out["gpu_bus"] += f" @ {bus:02x}:{dev:02x}"
    if importlib.util.find_spec("pynvml") is not None:
        try:
            pynvml = importlib.import_module("pynvml")
            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            out["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        except Exception:  # noqa: BLE001 - NVML is optional
            pass
    return out


def static_after_init(torch: Any) -> int:
    """The memory allocated once garbage is collected and the device idle, with the peaks reset
    from here: what the model (wrapped) and its inputs hold before the first step."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()  # alloc_retries counts this configuration's
    return int(torch.cuda.memory_allocated())


def peaks(torch: Any) -> dict[str, int]:
    """The device's peak allocated and reserved memory since the last reset, as the rows name them."""
    return {
        "peak_alloc": int(torch.cuda.max_memory_allocated()),
        "peak_reserved": int(torch.cuda.max_memory_reserved()),
        **alloc_retries(torch),
    }


def alloc_retries(torch: Any) -> dict[str, int]:
    """``alloc_retries``: how often the caching allocator, a cudaMalloc having failed, freed its
    cached blocks and tried again (``num_alloc_retries``) since the accumulated stats were reset:
    the cost of running near a full card."""
    return {"alloc_retries": int(torch.cuda.memory_stats().get("num_alloc_retries", 0))}


def release(torch: Any) -> None:
    """Give back what the last configuration left: collect, wait for the device, empty the cache."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def nvml_used(torch: Any) -> int | None:
    """This process's device's used memory as NVML sees it (the physical index behind
    ``CUDA_VISIBLE_DEVICES``), or None without nvidia-ml-py or on any NVML error."""
    if importlib.util.find_spec("pynvml") is None:
        return None
    try:
        pynvml = importlib.import_module("pynvml")
        pynvml.nvmlInit()
        index = torch.cuda.current_device()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            index = int(visible.split(",")[index])
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).used)
    except Exception:  # noqa: BLE001 - NVML is optional
        return None


def _nccl_version(torch: Any) -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - no NCCL in this build
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def environment(torch: Any, transformers: Any, *, distributed: bool | None = None) -> dict[str, Any]:
    """The card and software versions every row carries. ``distributed`` None: one process (no
    total memory, no NCCL); True/False: a torchrun rank, with the NCCL version where it is used."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    env: dict[str, Any] = {"accelerator": catalog_id(props.name), "gpu": props.name, "sms": props.multi_processor_count}
    if distributed is not None:
        env["gpu_mem_total"] = int(props.total_memory)
    env |= {"torch": torch.__version__, "transformers": transformers.__version__}
    if distributed is not None:
        env["nccl"] = _nccl_version(torch) if distributed else None
    env["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
    return env


# --- rows and launches -----------------------------------------------------------------------------


def print_configs(configs: Iterable[Any]) -> None:
    """``--list``: each configuration's name and its other fields as JSON."""
    for c in configs:
        print(c.name, json.dumps({k: v for k, v in asdict(c).items() if k != "name"}))


def append_row(out: Path, row: dict[str, Any]) -> None:
    """One JSON line appended to ``out``."""
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def rows(out: Path) -> list[dict[str, Any]]:
    """The rows already in ``out`` (none when it does not exist)."""
    if not out.is_file():
        return []
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]


def chosen(configs: Sequence[Any], only: str | None) -> tuple[list[Any], list[str]]:
    """The configurations ``--only`` names, in its order (all of ``configs`` without it), and the
    names it gave that are not configurations."""
    if not only:
        return list(configs), []
    by_name = {c.name: c for c in configs}
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    return [by_name[n] for n in wanted if n in by_name], [n for n in wanted if n not in by_name]


def no_nvlink_multicast() -> None:
    """NCCL, torch's symmetric memory and NVSHMEM without NVLink multicast (unless set already)."""
    for key, value in (
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
    ):
        os.environ.setdefault(key, value)


def torchrun(
    script: str,
    processes: int,
    *,
    out: Path,
    status_dir: Path,
    names: Iterable[str],
    timeout_s: int,
    extra: Sequence[str] = (),
) -> int:
    """``script --worker`` under ``torchrun --standalone --nproc_per_node=processes`` for the
    configurations ``names`` (and the worker's ``extra`` arguments); its exit status, or -1 when it
    ran past ``timeout_s`` (every rank killed)."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        script,
        "--worker",
        "--out",
        str(out),
        "--status-dir",
        str(status_dir),
        "--only",
        ",".join(names),
        *extra,
    ]
    proc = subprocess.Popen(cmd, start_new_session=True)  # its own group: a timeout ends every rank
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return -1


@dataclass(frozen=True)
class Rank:
    """One ``torchrun`` rank, set up: torch, transformers (quiet), ``torch.distributed`` with its
    NCCL process group, and where this rank stands."""

    torch: Any
    transformers: Any
    dist: Any
    rank: int
    world: int
    local_rank: int


def init_rank(pg_timeout_s: float) -> Rank:
    """This process as a ``torchrun`` rank: its GPU chosen and an NCCL process group whose
    collectives give up after ``pg_timeout_s`` (a rank stuck behind one that died)."""
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")
    dist = importlib.import_module("torch.distributed")
    transformers.logging.set_verbosity_error()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group(
        "nccl", timeout=datetime.timedelta(seconds=pg_timeout_s), device_id=torch.device("cuda", local_rank)
    )
    return Rank(torch, transformers, dist, rank, world, local_rank)


def relaunch(
    pending: Sequence[Any],
    *,
    launch: Callable[[list[str]], int],
    done: Callable[[], set[str]],
    died: Callable[[Any, int], None],
    gave_up: Callable[[list[Any]], None] | None = None,
) -> int:
    """``launch`` the ``pending`` configurations (by name) until each has a row (``done``): after a
    launch that died, the configuration it was running (the first without a row) is handed to
    ``died`` with the exit status and the rest are launched again; after three deaths ``gave_up``
    hears what is left. 1 when a launch died, else 0."""
    left = list(pending)
    failures = 0
    while left:
        rc = launch([c.name for c in left])
        finished = done()
        left = [c for c in left if c.name not in finished]
        if rc == 0 or not left:
            break
        failures += 1
        if failures >= 3:
            if gave_up is not None:
                gave_up(left)
            break
        died(left[0], rc)
        left = left[1:]
    return 1 if failures else 0
