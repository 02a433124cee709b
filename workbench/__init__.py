"""SemCSE-Multi workbench: multifaceted, decodable embeddings of scientific literature.

The pipeline is a chain of stages, each adding a named artifact to a run directory:

    corpus -> 01 generate (summaries.jsonl, judgements.jsonl) -> 02 train -> 03 distill
           -> 04 decode -> 05 visualize -> 06 evaluate

Import the modules you need (`workbench.corpus`, `workbench.aspects`, `workbench.llm`,
`workbench.generate`, ...); this top level stays light so that `import workbench`
does not pull in torch.
"""

__version__ = "0.1.0"
