"""The 13-model zoo of issue 10: transformers models from their configs, random weights.

``build(name) -> (model, args, kwargs)``: the model in eval mode and one call's inputs
(batch 1, sequence 64, images 224x224, one second of 16 kHz audio, an 80x3000
log-mel spectrogram for Whisper). Seeded; nothing is downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import transformers as tr

Built = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1)


def _ids(vocab: int, n: int = 64) -> torch.Tensor:
    return torch.randint(0, vocab, (1, n), generator=_gen())


def _image() -> torch.Tensor:
    return torch.randn(1, 3, 224, 224, generator=_gen())


def _llama(
    hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, seq: int = 64
) -> Built:
    config = tr.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=32000,
    )
    return tr.LlamaForCausalLM(config), (_ids(32000, seq),), {}


def gpt2(n_layer: int = 12, **config: Any) -> torch.nn.Module:
    """GPT-2 small (``GPT2Config``'s defaults but ``n_layer`` and ``config``) with torch's
    generator seeded (0), in eval mode: the zoo's ``gpt2`` and the other benchmarks'
    (``--quick``: ``n_layer=2``)."""
    torch.manual_seed(0)
    return tr.GPT2LMHeadModel(tr.GPT2Config(n_layer=n_layer, **config)).eval()


BUILDERS: dict[str, Callable[[], Built]] = {
    "gpt2": lambda: (gpt2(), (_ids(50257),), {}),
    "bert": lambda: (tr.BertModel(tr.BertConfig()), (_ids(30522),), {}),
    "distilbert": lambda: (tr.DistilBertModel(tr.DistilBertConfig()), (_ids(30522),), {}),
    "llama": lambda: _llama(512, 1376, layers=8, heads=8, kv_heads=8),
    "mixtral": lambda: (
        tr.MixtralForCausalLM(
            tr.MixtralConfig(
                hidden_size=512,
                intermediate_size=1024,
                num_hidden_layers=4,
                num_attention_heads=8,
                num_key_value_heads=8,
                num_local_experts=4,
                num_experts_per_tok=2,
                vocab_size=32000,
            )
        ),
        (_ids(32000),),
        {},
    ),
    "t5": lambda: (
        tr.T5Model(tr.T5Config()),
        (),
        {"input_ids": _ids(32128), "decoder_input_ids": _ids(32128)},
    ),
    "whisper": lambda: (
        tr.WhisperModel(
            tr.WhisperConfig(
                d_model=384,
                encoder_layers=4,
                decoder_layers=4,
                encoder_attention_heads=6,
                decoder_attention_heads=6,
                encoder_ffn_dim=1536,
                decoder_ffn_dim=1536,
                num_mel_bins=80,
            )
        ),
        (),
        {
            "input_features": torch.randn(1, 80, 3000, generator=_gen()),
            "decoder_input_ids": _ids(51865, 16),
        },
    ),
    "vit": lambda: (tr.ViTModel(tr.ViTConfig()), (_image(),), {}),
    "resnet50": lambda: (tr.ResNetModel(tr.ResNetConfig()), (_image(),), {}),
    "convnext": lambda: (tr.ConvNextModel(tr.ConvNextConfig()), (_image(),), {}),
    "swin": lambda: (tr.SwinModel(tr.SwinConfig()), (_image(),), {}),
    "mobilenetv2": lambda: (tr.MobileNetV2Model(tr.MobileNetV2Config()), (_image(),), {}),
    "wav2vec2": lambda: (
        tr.Wav2Vec2Model(tr.Wav2Vec2Config()),
        (torch.randn(1, 16000, generator=_gen()),),
        {},
    ),
}
NAMES = list(BUILDERS)
"""The zoo, in the order of the issue's table."""

BUILDERS["llama1b"] = lambda: _llama(2048, 5632, layers=22, heads=32, kv_heads=4, seq=512)
"""Not in the zoo: issue 10's 1.1B-parameter Llama (22 layers, hidden 2048, sequence
512), for the GPU rows (``bench_zoo.py --device cuda --models llama1b``)."""


def build(name: str) -> Built:
    """The model ``name`` (one of :data:`NAMES`, or ``llama1b``), eval mode, and its
    call's inputs."""
    torch.manual_seed(0)
    model, args, kwargs = BUILDERS[name]()
    return model.eval(), args, kwargs
