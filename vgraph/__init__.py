"""vgraph: an LLM inference engine built around CUDA graph modes."""

from vgraph.entrypoints.llm import LLM
from vgraph.outputs import CompletionOutput, RequestOutput
from vgraph.sampling_params import SamplingParams

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]
__version__ = "0.1.0"
