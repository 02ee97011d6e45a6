"""The back half of the compiler: optimized graph -> files of the output folder."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import resources
from ..version import __version__
from ..ir import Graph, Program
from ..ir.symbolic import upper
from .c_writer import model_dims
from .c_writer import write_c, write_embedded_weights
from .lower import lower_graph
from .memory import MemoryPlan, check_address_space, check_arena_limit, plan_memory
from .weights import build_blob, layout_weights


@dataclass
class Generated:
    files: dict[str, bytes]           # relative path -> contents
    sources: list[str]                # the .c files to compile, relative to the folder
    program: Program
    plan: MemoryPlan
    manifest: dict = field(default_factory=dict)


def generate(g: Graph, *, prefix: str, target_name: str, source_name: str,
             max_arena: int | None = None, embed_weights: bool = False,
             manifest_extra: dict | None = None, pointer_bits: int = 64,
             arch: str = "", options: dict | None = None,
             command: list[str] | None = None) -> Generated:
    """command: the `mlcc compile` command line as words, for the banner of the sources."""
    prog, slots = lower_graph(g, options)
    plan = plan_memory(prog, slots)
    check_arena_limit(prog, plan, max_arena)
    consts = prog.constants()
    offsets, size = layout_weights(consts)
    io_bytes = {n: upper(prog.graph.values[n].nbytes)
                for n in prog.graph.inputs + prog.graph.outputs}
    check_address_space(plan, size, io_bytes, pointer_bits, arch or target_name)
    blob, model_id = build_blob(consts, offsets, size)
    src = write_c(prog, plan, offsets, prefix=prefix, model_id=model_id, weights_size=size,
                  source_name=source_name, target_name=target_name, embedded=embed_weights,
                  command=command)
    files: dict[str, bytes] = {"model.h": src.header.encode(), "model.c": src.source.encode(),
                               "weights.bin": blob}
    if embed_weights:
        files["weights.c"] = write_embedded_weights(blob, prefix, src.banner).encode()
    runtime = resources.runtime_c()
    for rel in src.runtime_files:
        files[f"runtime/{rel}"] = (runtime / rel).read_bytes()
    sources = ["model.c"] + (["weights.c"] if embed_weights else []) + \
        [f"runtime/{r}" for r in src.runtime_files if r.endswith(".c")]
    pg = prog.graph
    dims = model_dims(pg)

    def tensors(names):
        # a dynamic dimension as the text of its expression ("N"; its range under "dims");
        # "dynamic_axis": the axis whose size the data decides (shape: its maximum)
        return [{"name": n, "dtype": pg.values[n].dtype,
                 "shape": [d if isinstance(d, int) else d.text() for d in pg.values[n].shape],
                 # at the largest sizes: what a buffer for any size holds
                 **({"max_shape": [upper(d) for d in pg.values[n].shape]}
                    if pg.values[n].is_dynamic else {}),
                 **({"dynamic_axis": pg.values[n].dyn[0]} if pg.values[n].dyn else {})}
                for n in names]

    manifest = {
        "mlcc_version": __version__,
        "name": prefix,
        "source": {"file": source_name, "sha256": g.source_sha256},
        "target": target_name,
        "inputs": tensors(pg.inputs),
        "outputs": tensors(pg.outputs),
        "arena_size": plan.arena_size,
        "arena_align": 64,
        "intermediate_bytes": plan.total_intermediate,
        "weights_size": size,
        "model_id": f"{model_id:016x}",
        "kernel_calls": len(prog.calls),
        "embedded_weights": embed_weights,
        **({"dims": [{"name": v.name, "symbol": v.symbol, "min": v.lo, "max": v.hi,
                      **({"step": v.step} if v.step > 1 else {})}
                     for v in dims]} if dims else {}),
        **(manifest_extra or {}),
    }
    return Generated(files, sources, prog, plan, manifest)


def write_folder(folder: Path, files: dict[str, bytes]) -> None:
    """Writes files below `folder` (and nowhere else), replacing a previous mlcc output."""
    folder.mkdir(parents=True, exist_ok=True)
    old = folder / "manifest.json"
    if old.is_file():
        try:
            previous = json.loads(old.read_text()).get("files", [])
        except (ValueError, OSError):
            previous = []
        for rel in previous:
            p = (folder / rel).resolve()
            if folder.resolve() in p.parents and p.is_file() and rel not in files:
                p.unlink()
    for rel, data in sorted(files.items()):
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
