"""SemCSE-Multi workbench: multifaceted, decodable embeddings of scientific literature.

The pipeline is a chain of stages, each adding a named artifact to a run directory:

    corpus -> 01 generate (summaries.jsonl, judgements.jsonl) -> 02 train -> 03 distill
           -> 04 decode -> 05 visualize -> 06 evaluate

Import the modules you need (`workbench.data.corpus`, `workbench.data.aspects`, `workbench.generate.llm`,
`workbench.generate.summaries`, ...); this top level stays light so that `import workbench`
does not pull in torch.

Extensions (a corpus format, an LLM backend, a decoder, a way to find map regions, a stage-06
table) register themselves in a module of yours; name it in the WORKBENCH_PLUGINS environment
variable (comma-separated module names) and every process that imports workbench, the
notebooks' kernels included, imports it first. docs/architecture.md lists the extension points.
"""

import importlib
import os

__version__ = "0.1.0"


def load_plugins(names: str | None = None) -> list[str]:
    """Import the modules named in WORKBENCH_PLUGINS (or `names`), comma-separated; returns them.

    An import that fails raises, naming the plugin: a run should not go on without an
    extension it was told to use.
    """
    wanted = [n.strip() for n in (names if names is not None else os.environ.get("WORKBENCH_PLUGINS", "")).split(",")
              if n.strip()]
    for name in wanted:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise ImportError(f"WORKBENCH_PLUGINS names {name!r}, which cannot be imported: {exc}") from exc
    return wanted


load_plugins()
