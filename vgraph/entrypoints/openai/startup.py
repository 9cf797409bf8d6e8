"""What `vgraph serve` does before it serves: check the files its flags name and bind the port
(both before the model loads, so a mistake fails in a second, not after minutes of loading) and
log the resolved configuration once the engine core is up. Nothing here handles a request.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from vgraph.entrypoints.chat_utils import load_chat_template
from vgraph.entrypoints.generation_config import GENERATION_CONFIG_MODES

if TYPE_CHECKING:
    from vgraph.config import VGraphConfig
    from vgraph.engine.async_llm import AsyncLLM

logger = logging.getLogger("vgraph.entrypoints.openai.server")


def check_startup_files(chat_template: str | None, generation_config: str) -> None:
    """--chat-template must be a file or a template, and a --generation-config other than auto or
    vllm a folder: checked before the engine core loads the model (as vLLM does), read again by
    build_app. ValueError names the flag's value."""
    if chat_template is not None:
        load_chat_template(chat_template)
    if generation_config not in GENERATION_CONFIG_MODES and not Path(generation_config).is_dir():
        raise ValueError(
            f"generation_config={generation_config!r} is not allowed: no such folder; use auto, "
            "vllm or a folder holding generation_config.json"
        )


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and listen before the model loads, so a busy port fails in a second (vLLM does the
    same); OSError names the address.

    The protocol is IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only
    on connections whose socket says TCP, and with it on, a streamed response's first chunk after
    the headers waits for the client's delayed ACK (40 ms) on every keep-alive request."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def log_resolved_config(config: VGraphConfig, engine: AsyncLLM) -> None:
    cc, mc = config.compilation_config, config.model_config
    sizes = list(cc.cudagraph_capture_sizes or ())
    shown = str(sizes) if len(sizes) <= 8 else f"[{sizes[0]}, {sizes[1]}, ..., {sizes[-1]}]"
    ready = getattr(engine.client, "ready", None)
    logger.info(
        "resolved config: model %s (%s), dtype %s, max_model_len %d, device %s, attention "
        "backend %s, cudagraph_mode %s, %d capture sizes %s, piecewise compile %s (inductor "
        "%s), KV cache %s blocks of %d tokens, max_num_seqs %d, max_num_batched_tokens %d, "
        "async scheduling %s",
        mc.name,
        mc.model,
        str(mc.dtype).removeprefix("torch."),
        mc.max_model_len,
        config.device,
        config.attention_backend,
        cc.cudagraph_mode.name if cc.cudagraph_mode else "NONE",
        len(sizes),
        shown,
        "on" if cc.cudagraph_mode and cc.cudagraph_mode.needs_piecewise() else "off",
        "on" if cc.use_inductor else "off",
        ready.num_kv_blocks if ready is not None else "?",
        config.cache_config.block_size,
        config.scheduler_config.max_num_seqs,
        config.scheduler_config.max_num_batched_tokens,
        "on" if config.scheduler_config.async_scheduling else "off",
    )
