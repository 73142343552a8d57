"""cellspec: exact, reproducible LLM serving on ONNX Runtime, with DFlash speculative decoding.

`import cellspec` stays light: the high-level API is imported on first use.
"""

__version__ = "0.1.0"

__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name: str):
    if name in ("LLM", "SamplingParams"):
        from cellspec import llm

        return getattr(llm, name)
    raise AttributeError(f"module 'cellspec' has no attribute {name!r}")
