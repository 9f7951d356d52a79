"""Real transformers models built from configs with random weights (nothing downloaded)."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch


def _ids(vocab: int, seq: int = 16) -> torch.Tensor:
    return torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(0))


def gpt2(n_layer: int = 2, **config: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    """GPT-2 LM head model (GPT2Config defaults but ``n_layer``), eval mode, ids (1, 16)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=n_layer, **config)).eval()
    return model, _ids(model.config.vocab_size)


def bert(num_hidden_layers: int = 2, **config: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    """BERT encoder (BertConfig defaults but the layer count), eval mode, ids (1, 16)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=num_hidden_layers, **config)).eval()
    return model, _ids(model.config.vocab_size)


def vit(**config: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    """A small ViT (2 layers, width 64, 32x32 images, 8x8 patches), eval mode."""
    from transformers import ViTConfig, ViTModel

    cfg: dict[str, Any] = dict(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
    )
    cfg.update(config)
    torch.manual_seed(0)
    model = ViTModel(ViTConfig(**cfg)).eval()
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return model, pixels


def resnet(**config: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    """A small ResNet (basic blocks, two stages of depth 1), eval mode, 32x32 images."""
    from transformers import ResNetConfig, ResNetModel

    cfg: dict[str, Any] = dict(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"
    )
    cfg.update(config)
    torch.manual_seed(0)
    model = ResNetModel(ResNetConfig(**cfg)).eval()
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return model, pixels
