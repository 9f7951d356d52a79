"""Tiny transformers architectures for the breadth suite (``tests/test_breadth.py``).

Every model is built from a config with random weights (``AutoModel.from_config``,
seeded): nothing is downloaded. Widths are 32-64, one or two layers, sequences of 8
tokens, 32x32 images, 0.1 s of 16 kHz audio, so the whole suite stays in CI's budget.
Each :class:`Arch` knows how to make its seeded inputs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

VOCAB = 128
SEQ = 8

# shared tiny sizes, in each family's own config spelling
LLAMA_LIKE: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
BERT_LIKE: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    max_position_embeddings=64,
)
SEQ2SEQ: dict[str, Any] = dict(
    vocab_size=VOCAB,
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=0,
)
VIT_LIKE: dict[str, Any] = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    image_size=32,
    patch_size=8,
)
AUDIO: dict[str, Any] = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    conv_dim=(16, 16),
    conv_stride=(5, 2),
    conv_kernel=(10, 3),
    num_feat_extract_layers=2,
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=2,
)


# generic tiny sizes for configs that take whichever of these spellings they know (the
# rest become unused config attributes): the third widening of the suite
DECODER_ANY: dict[str, Any] = dict(
    LLAMA_LIKE, head_dim=8, num_layers=2, n_layer=2, n_embd=32, n_head=2, d_model=32, num_heads=4
)
SEQ2SEQ_ANY: dict[str, Any] = dict(
    SEQ2SEQ, num_layers=1, num_decoder_layers=1, d_ff=64, d_kv=16, num_heads=2, hidden_size=32
)
VISION_ANY: dict[str, Any] = dict(VIT_LIKE, num_channels=3)
MLA: dict[str, Any] = dict(  # multi-head latent attention (DeepSeek-V2/V3, MiniCPM3, LongCat)
    DECODER_ANY,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=8,
    kv_lora_rank=16,
    num_key_value_heads=4,
)
PYRAMID: dict[str, Any] = dict(  # pyramid vision transformers (PVT, PVTv2, GLPN)
    VISION_ANY, hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 1, 1]
)


@dataclass(frozen=True)
class Arch:
    """One architecture: ``config`` names a ``transformers`` config class, ``kwargs``
    its tiny sizes, ``inputs`` the input kind (``ids``, ``seq2seq``, ``pixels``,
    ``audio``, ``whisper``), ``batch`` the batch size of images."""

    name: str
    family: str
    config: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: str = "ids"
    batch: int = 1

    def build(self) -> torch.nn.Module:
        """The model (``AutoModel.from_config``, seed 0), in eval mode."""
        import transformers

        cfg = getattr(transformers, self.config)(**self.kwargs)
        torch.manual_seed(0)
        return transformers.AutoModel.from_config(cfg).eval()

    def make_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` of the model call, from a generator seeded with 0."""
        g = torch.Generator().manual_seed(0)
        if self.inputs == "ids":
            return (torch.randint(3, VOCAB, (1, SEQ), generator=g),), {}
        if self.inputs == "seq2seq":
            ids = torch.randint(3, VOCAB, (1, SEQ), generator=g)
            dec = torch.randint(3, VOCAB, (1, SEQ // 2), generator=g)
            return (ids,), {"decoder_input_ids": dec}
        if self.inputs == "pixels":
            return (torch.randn(self.batch, 3, 32, 32, generator=g),), {}
        if self.inputs == "audio":
            return (torch.randn(1, 1600, generator=g),), {}
        if self.inputs == "whisper":
            feats = torch.randn(
                1, self.kwargs["num_mel_bins"], 2 * self.kwargs["max_source_positions"], generator=g
            )
            dec = torch.randint(3, VOCAB, (1, SEQ // 2), generator=g)
            return (feats,), {"decoder_input_ids": dec}
        raise ValueError(f"unknown input kind {self.inputs!r}")


ARCHS: list[Arch] = [
    # -- decoder LMs ------------------------------------------------------------------------
    Arch(
        "gpt2",
        "decoder",
        "GPT2Config",
        dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64),
    ),
    Arch(
        "gpt_neo",
        "decoder",
        "GPTNeoConfig",
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            num_layers=2,
            num_heads=2,
            attention_types=[[["global", "local"], 1]],
            max_position_embeddings=64,
            window_size=4,
        ),
    ),
    Arch(
        "gptj",
        "decoder",
        "GPTJConfig",
        dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, rotary_dim=8, n_positions=64),
    ),
    Arch("llama", "decoder", "LlamaConfig", LLAMA_LIKE),
    Arch("mistral", "decoder", "MistralConfig", LLAMA_LIKE),
    Arch(
        "mixtral",
        "decoder-moe",
        "MixtralConfig",
        dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2),
    ),
    Arch("qwen2", "decoder", "Qwen2Config", LLAMA_LIKE),
    Arch(
        "qwen2_moe",
        "decoder-moe",
        "Qwen2MoeConfig",
        dict(
            LLAMA_LIKE,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        ),
    ),
    Arch("phi", "decoder", "PhiConfig", LLAMA_LIKE),
    Arch("gemma", "decoder", "GemmaConfig", dict(LLAMA_LIKE, head_dim=8)),
    Arch(
        "falcon",
        "decoder",
        "FalconConfig",
        dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4),
    ),
    Arch(
        "bloom",
        "decoder",
        "BloomConfig",
        dict(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4),
    ),
    Arch(
        "opt",
        "decoder",
        "OPTConfig",
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            ffn_dim=64,
            word_embed_proj_dim=32,
            max_position_embeddings=64,
        ),
    ),
    Arch("gpt_neox", "decoder", "GPTNeoXConfig", LLAMA_LIKE),
    Arch(
        "codegen",
        "decoder",
        "CodeGenConfig",
        dict(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64, n_ctx=64
        ),
    ),
    Arch("stablelm", "decoder", "StableLmConfig", LLAMA_LIKE),
    # -- encoders ---------------------------------------------------------------------------
    Arch("bert", "encoder", "BertConfig", BERT_LIKE),
    Arch("roberta", "encoder", "RobertaConfig", dict(BERT_LIKE, pad_token_id=1)),
    Arch(
        "distilbert",
        "encoder",
        "DistilBertConfig",
        dict(
            vocab_size=VOCAB,
            dim=32,
            hidden_dim=64,
            n_layers=2,
            n_heads=2,
            max_position_embeddings=64,
        ),
    ),
    Arch("albert", "encoder", "AlbertConfig", dict(BERT_LIKE, embedding_size=16)),
    Arch("electra", "encoder", "ElectraConfig", dict(BERT_LIKE, embedding_size=16)),
    Arch("deberta_v2", "encoder", "DebertaV2Config", BERT_LIKE),
    # -- encoder-decoders -------------------------------------------------------------------
    Arch(
        "t5",
        "seq2seq",
        "T5Config",
        dict(
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=1,
            num_heads=2,
            decoder_start_token_id=0,
        ),
        "seq2seq",
    ),
    Arch("bart", "seq2seq", "BartConfig", SEQ2SEQ, "seq2seq"),
    Arch("pegasus", "seq2seq", "PegasusConfig", SEQ2SEQ, "seq2seq"),
    Arch("marian", "seq2seq", "MarianConfig", SEQ2SEQ, "seq2seq"),
    Arch(
        "whisper",
        "seq2seq",
        "WhisperConfig",
        dict(
            SEQ2SEQ,
            num_mel_bins=16,
            max_source_positions=16,
            max_target_positions=32,
            decoder_start_token_id=0,
        ),
        "whisper",
    ),
    # -- vision -----------------------------------------------------------------------------
    Arch("vit", "vision", "ViTConfig", VIT_LIKE, "pixels"),
    Arch("deit", "vision", "DeiTConfig", VIT_LIKE, "pixels"),
    Arch("beit", "vision", "BeitConfig", VIT_LIKE, "pixels"),
    Arch(
        "swin",
        "vision",
        "SwinConfig",
        dict(
            image_size=32,
            patch_size=4,
            embed_dim=16,
            depths=[1, 1],
            num_heads=[2, 2],
            window_size=4,
        ),
        "pixels",
    ),
    Arch(
        "resnet",
        "vision-cnn",
        "ResNetConfig",
        dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"),
        "pixels",
    ),
    Arch(
        "convnext",
        "vision-cnn",
        "ConvNextConfig",
        dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
        "pixels",
    ),
    Arch(
        "mobilenet_v2",
        "vision-cnn",
        "MobileNetV2Config",
        dict(image_size=32, depth_multiplier=0.25, min_depth=4),
        "pixels",
        batch=2,
    ),  # batch norm in train mode needs 2 values per channel at 1x1
    Arch(
        "regnet",
        "vision-cnn",
        "RegNetConfig",
        dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8),
        "pixels",
    ),
    # -- audio ------------------------------------------------------------------------------
    Arch("wav2vec2", "audio", "Wav2Vec2Config", AUDIO, "audio"),
    Arch("hubert", "audio", "HubertConfig", AUDIO, "audio"),
    # -- state space ------------------------------------------------------------------------
    Arch(
        "mamba",
        "ssm",
        "MambaConfig",
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            state_size=4,
            num_hidden_layers=2,
            expand=2,
            conv_kernel=4,
        ),
    ),
    # -- more architectures (probed for the nested-tensor and patch-namespace fixes) -----
    Arch("gemma2", "decoder", "Gemma2Config", dict(LLAMA_LIKE, head_dim=8)),
    Arch("gemma3", "decoder", "Gemma3TextConfig", dict(LLAMA_LIKE, head_dim=8)),
    Arch("qwen3", "decoder", "Qwen3Config", dict(LLAMA_LIKE, head_dim=8)),
    Arch(
        "qwen3_moe",
        "decoder-moe",
        "Qwen3MoeConfig",
        dict(
            LLAMA_LIKE, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32
        ),
    ),
    Arch("phi3", "decoder", "Phi3Config", dict(LLAMA_LIKE, pad_token_id=0)),
    Arch("olmo", "decoder", "OlmoConfig", dict(LLAMA_LIKE, pad_token_id=0)),
    Arch("olmo2", "decoder", "Olmo2Config", dict(LLAMA_LIKE, pad_token_id=0)),
    Arch(
        "olmoe",
        "decoder-moe",
        "OlmoeConfig",
        dict(LLAMA_LIKE, pad_token_id=0, num_experts=4, num_experts_per_tok=2),
    ),
    Arch("cohere", "decoder", "CohereConfig", dict(LLAMA_LIKE, pad_token_id=0)),
    Arch("starcoder2", "decoder", "Starcoder2Config", LLAMA_LIKE),
    Arch("granite", "decoder", "GraniteConfig", LLAMA_LIKE),
    Arch(
        "granitemoe",
        "decoder-moe",
        "GraniteMoeConfig",
        dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2),
    ),
    Arch("glm", "decoder", "GlmConfig", dict(LLAMA_LIKE, head_dim=8, pad_token_id=0)),
    Arch("helium", "decoder", "HeliumConfig", dict(LLAMA_LIKE, head_dim=8, pad_token_id=0)),
    Arch("smollm3", "decoder", "SmolLM3Config", dict(LLAMA_LIKE, pad_token_id=0)),
    Arch("nemotron", "decoder", "NemotronConfig", dict(LLAMA_LIKE, head_dim=8)),
    Arch("persimmon", "decoder", "PersimmonConfig", dict(LLAMA_LIKE)),
    Arch(
        "phimoe",
        "decoder-moe",
        "PhimoeConfig",
        dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2),
    ),
    Arch(
        "mpt",
        "decoder",
        "MptConfig",
        dict(vocab_size=VOCAB, d_model=32, n_heads=4, n_layers=2, max_seq_len=64),
    ),
    Arch(
        "xglm",
        "decoder",
        "XGLMConfig",
        dict(
            vocab_size=VOCAB,
            d_model=32,
            num_layers=2,
            attention_heads=2,
            ffn_dim=64,
            max_position_embeddings=64,
        ),
    ),
    Arch(
        "ctrl",
        "decoder",
        "CTRLConfig",
        dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, dff=64, n_positions=64),
    ),
    Arch(
        "mamba2",
        "ssm",
        "Mamba2Config",
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_heads=4,
            head_dim=16,
            state_size=16,
            n_groups=1,
            expand=2,
            chunk_size=8,
        ),
    ),
    Arch(
        "falcon_mamba",
        "ssm",
        "FalconMambaConfig",
        dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, state_size=8),
    ),
    Arch(
        "jamba",
        "ssm",
        "JambaConfig",
        dict(
            LLAMA_LIKE,
            num_experts=2,
            num_experts_per_tok=1,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            mamba_d_state=8,
            use_mamba_kernels=False,
        ),
    ),
    Arch(
        "mobilebert",
        "encoder",
        "MobileBertConfig",
        dict(BERT_LIKE, embedding_size=16, intra_bottleneck_size=32, num_feedforward_networks=1),
    ),
    Arch("convbert", "encoder", "ConvBertConfig", dict(BERT_LIKE, embedding_size=32)),
    Arch("roformer", "encoder", "RoFormerConfig", dict(BERT_LIKE, embedding_size=32)),
    Arch("esm", "encoder", "EsmConfig", dict(BERT_LIKE, pad_token_id=1, mask_token_id=2)),
    Arch("megatron_bert", "encoder", "MegatronBertConfig", BERT_LIKE),
    Arch(
        "modernbert",
        "encoder",
        "ModernBertConfig",
        dict(
            BERT_LIKE,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
        ),
    ),
    Arch("squeezebert", "encoder", "SqueezeBertConfig", dict(BERT_LIKE, embedding_size=32)),
    Arch(
        "xlnet",
        "encoder",
        "XLNetConfig",
        dict(vocab_size=VOCAB, d_model=32, n_layer=2, n_head=2, d_inner=64),
    ),
    Arch("fnet", "encoder", "FNetConfig", dict(BERT_LIKE)),
    Arch(
        "canine",
        "encoder",
        "CanineConfig",
        dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            num_hash_buckets=64,
            local_transformer_stride=4,
        ),
    ),
    Arch("big_bird", "encoder", "BigBirdConfig", dict(BERT_LIKE, attention_type="original_full")),
    Arch(
        "longformer",
        "encoder",
        "LongformerConfig",
        dict(BERT_LIKE, attention_window=4, pad_token_id=1),
    ),
    Arch("mbart", "seq2seq", "MBartConfig", SEQ2SEQ, inputs="seq2seq"),
    Arch("dinov2", "vision", "Dinov2Config", VIT_LIKE, inputs="pixels"),
    Arch(
        "swinv2",
        "vision",
        "Swinv2Config",
        dict(
            image_size=32,
            patch_size=4,
            embed_dim=16,
            depths=[1, 1],
            num_heads=[2, 2],
            window_size=4,
        ),
        inputs="pixels",
    ),
    Arch(
        "poolformer",
        "vision-cnn",
        "PoolFormerConfig",
        dict(hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1]),
        inputs="pixels",
    ),
    Arch(
        "mobilevit",
        "vision",
        "MobileViTConfig",
        dict(
            image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32]
        ),
        inputs="pixels",
        batch=2,
    ),
    Arch(
        "segformer",
        "vision",
        "SegformerConfig",
        dict(
            hidden_sizes=[8, 16, 16, 16],
            depths=[1, 1, 1, 1],
            num_attention_heads=[1, 1, 1, 1],
            decoder_hidden_size=16,
        ),
        inputs="pixels",
    ),
    Arch(
        "focalnet",
        "vision",
        "FocalNetConfig",
        dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], focal_levels=[2, 2]),
        inputs="pixels",
    ),
    Arch("wavlm", "audio", "WavLMConfig", dict(AUDIO), inputs="audio"),
    Arch("sew", "audio", "SEWConfig", dict(AUDIO), inputs="audio"),
    Arch("unispeech", "audio", "UniSpeechConfig", dict(AUDIO), inputs="audio"),
    Arch("data2vec_audio", "audio", "Data2VecAudioConfig", dict(AUDIO), inputs="audio"),
    # -- generic tiny configs (DECODER_ANY, SEQ2SEQ_ANY, VISION_ANY, ...) --------------
    Arch("apertus", "decoder", "ApertusConfig", DECODER_ANY),
    Arch("arcee", "decoder", "ArceeConfig", DECODER_ANY),
    Arch("biogpt", "decoder", "BioGptConfig", DECODER_ANY),
    Arch("bitnet", "decoder", "BitNetConfig", DECODER_ANY),
    Arch("cohere2", "decoder", "Cohere2Config", DECODER_ANY),
    Arch("diffllama", "decoder", "DiffLlamaConfig", DECODER_ANY),
    Arch("doge", "decoder", "DogeConfig", DECODER_ANY),
    Arch("ernie4_5", "decoder", "Ernie4_5Config", DECODER_ANY),
    Arch(
        "ernie4_5_moe",
        "decoder-moe",
        "Ernie4_5_MoeConfig",
        dict(DECODER_ANY, moe_num_experts=4, moe_intermediate_size=32, moe_k=2),
    ),
    Arch("exaone4", "decoder", "Exaone4Config", DECODER_ANY),
    Arch("falcon_h1", "ssm", "FalconH1Config", DECODER_ANY),
    Arch(
        "glm4_moe",
        "decoder-moe",
        "Glm4MoeConfig",
        dict(
            DECODER_ANY,
            n_routed_experts=4,
            moe_intermediate_size=32,
            num_experts_per_tok=2,
            n_group=1,
            topk_group=1,
        ),
    ),
    Arch("gpt_bigcode", "decoder", "GPTBigCodeConfig", DECODER_ANY),
    Arch("gpt_neox_japanese", "decoder", "GPTNeoXJapaneseConfig", DECODER_ANY),
    Arch("gpt_oss", "decoder-moe", "GptOssConfig", DECODER_ANY),
    Arch("granitemoeshared", "decoder-moe", "GraniteMoeSharedConfig", DECODER_ANY),
    Arch("hunyuan_v1_dense", "decoder", "HunYuanDenseV1Config", DECODER_ANY),
    Arch("hunyuan_v1_moe", "decoder-moe", "HunYuanMoEV1Config", DECODER_ANY),
    Arch("jetmoe", "decoder-moe", "JetMoeConfig", DECODER_ANY),
    Arch("lfm2", "ssm", "Lfm2Config", DECODER_ANY),
    Arch("llama4_text", "decoder-moe", "Llama4TextConfig", DECODER_ANY),
    Arch("minimax", "decoder-moe", "MiniMaxConfig", DECODER_ANY),
    Arch("ministral", "decoder", "MinistralConfig", DECODER_ANY),
    Arch(
        "nemotron_h",
        "ssm",
        "NemotronHConfig",
        dict(
            DECODER_ANY,
            mamba_num_heads=4,
            mamba_head_dim=16,
            ssm_state_size=16,
            n_groups=1,
            hybrid_override_pattern="M*",
            mamba_n_groups=1,
        ),
    ),
    Arch("olmo3", "decoder", "Olmo3Config", DECODER_ANY),
    Arch("openai_gpt", "decoder", "OpenAIGPTConfig", DECODER_ANY),
    Arch("seed_oss", "decoder", "SeedOssConfig", DECODER_ANY),
    Arch("vaultgemma", "decoder", "VaultGemmaConfig", DECODER_ANY),
    Arch("internlm3", "decoder", "InternLM3Config", DECODER_ANY),
    Arch("gemma3_text", "decoder", "Gemma3TextConfig", DECODER_ANY),
    Arch("camembert", "encoder", "CamembertConfig", BERT_LIKE),
    Arch("data2vec_text", "encoder", "Data2VecTextConfig", BERT_LIKE),
    Arch("deberta", "encoder", "DebertaConfig", BERT_LIKE),
    Arch("ernie", "encoder", "ErnieConfig", BERT_LIKE),
    Arch("flaubert", "encoder", "FlaubertConfig", BERT_LIKE),
    Arch("ibert", "encoder", "IBertConfig", BERT_LIKE),
    Arch("mpnet", "encoder", "MPNetConfig", BERT_LIKE),
    Arch(
        "luke", "encoder", "LukeConfig", dict(BERT_LIKE, entity_vocab_size=64, entity_emb_size=16)
    ),
    Arch("mra", "encoder", "MraConfig", BERT_LIKE),
    Arch("nystromformer", "encoder", "NystromformerConfig", BERT_LIKE),
    Arch("rembert", "encoder", "RemBertConfig", BERT_LIKE),
    Arch("roberta_prelayernorm", "encoder", "RobertaPreLayerNormConfig", BERT_LIKE),
    Arch(
        "roc_bert",
        "encoder",
        "RoCBertConfig",
        dict(
            BERT_LIKE,
            pronunciation_vocab_size=32,
            shape_vocab_size=32,
            pronunciation_embed_dim=16,
            shape_embed_dim=16,
        ),
    ),
    Arch("xlm", "encoder", "XLMConfig", BERT_LIKE),
    Arch("xlm_roberta", "encoder", "XLMRobertaConfig", BERT_LIKE),
    Arch("yoso", "encoder", "YosoConfig", BERT_LIKE),
    Arch("nomic_bert", "encoder", "NomicBertConfig", BERT_LIKE),
    Arch("bert_generation", "encoder", "BertGenerationConfig", BERT_LIKE),
    Arch("splinter", "encoder", "SplinterConfig", BERT_LIKE),
    Arch("blenderbot", "seq2seq", "BlenderbotConfig", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("blenderbot_small", "seq2seq", "BlenderbotSmallConfig", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("m2m_100", "seq2seq", "M2M100Config", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("mvp", "seq2seq", "MvpConfig", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("plbart", "seq2seq", "PLBartConfig", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("pegasus_x", "seq2seq", "PegasusXConfig", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("led", "seq2seq", "LEDConfig", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("longt5", "seq2seq", "LongT5Config", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("mt5", "seq2seq", "MT5Config", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("umt5", "seq2seq", "UMT5Config", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch("fsmt", "seq2seq", "FSMTConfig", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch(
        "switch_transformers", "seq2seq", "SwitchTransformersConfig", SEQ2SEQ_ANY, inputs="seq2seq"
    ),
    Arch("nllb_moe", "seq2seq", "NllbMoeConfig", SEQ2SEQ_ANY, inputs="seq2seq"),
    Arch(
        "bigbird_pegasus",
        "seq2seq",
        "BigBirdPegasusConfig",
        dict(SEQ2SEQ_ANY, attention_type="original_full"),
        inputs="seq2seq",
    ),
    Arch("cvt", "vision", "CvtConfig", VISION_ANY, inputs="pixels", batch=2),
    Arch(
        "efficientnet",
        "vision-cnn",
        "EfficientNetConfig",
        dict(
            VISION_ANY, width_coefficient=0.1, depth_coefficient=0.1, hidden_dim=128, image_size=32
        ),
        inputs="pixels",
        batch=2,
    ),
    Arch(
        "mobilenet_v1",
        "vision-cnn",
        "MobileNetV1Config",
        dict(VISION_ANY, depth_multiplier=0.25, image_size=32),
        inputs="pixels",
        batch=2,
    ),
    Arch(
        "swiftformer",
        "vision-cnn",
        "SwiftFormerConfig",
        dict(VISION_ANY, embed_dims=[8, 16, 24, 32], depths=[1, 1, 1, 1]),
        inputs="pixels",
        batch=2,
    ),
    Arch("ijepa", "vision", "IJepaConfig", VISION_ANY, inputs="pixels"),
    Arch("vit_msn", "vision", "ViTMSNConfig", VISION_ANY, inputs="pixels"),
    Arch("data2vec_vision", "vision", "Data2VecVisionConfig", VISION_ANY, inputs="pixels"),
    Arch(
        "dinov2_with_registers", "vision", "Dinov2WithRegistersConfig", VISION_ANY, inputs="pixels"
    ),
    Arch(
        "textnet",
        "vision-cnn",
        "TextNetConfig",
        dict(
            VISION_ANY,
            stem_out_channels=8,
            conv_layer_kernel_sizes=[[[3, 3]], [[3, 3]], [[3, 3]], [[3, 3]]],
            conv_layer_stride=[[1], [2], [2], [2]],
            hidden_sizes=[8, 16, 16, 16, 16],
        ),
        inputs="pixels",
        batch=2,
    ),
    Arch(
        "hgnet_v2",
        "vision-cnn",
        "HGNetV2Config",
        dict(
            VISION_ANY,
            stem_channels=[3, 8, 8],
            stage_in_channels=[8, 16, 32, 64],
            stage_mid_channels=[8, 16, 32, 64],
            stage_out_channels=[16, 32, 64, 64],
            hidden_sizes=[16, 32, 64, 64],
        ),
        inputs="pixels",
        batch=2,
    ),
    Arch("vitdet", "vision", "VitDetConfig", VISION_ANY, inputs="pixels"),
    Arch("sew_d", "audio", "SEWDConfig", AUDIO, inputs="audio"),
    Arch("unispeech_sat", "audio", "UniSpeechSatConfig", AUDIO, inputs="audio"),
    Arch("wav2vec2_conformer", "audio", "Wav2Vec2ConformerConfig", AUDIO, inputs="audio"),
    Arch(
        "deepseek_v2",
        "decoder-moe",
        "DeepseekV2Config",
        dict(
            MLA,
            head_dim=16,
            q_lora_rank=None,
            n_routed_experts=4,
            n_shared_experts=1,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
        ),
    ),
    Arch(
        "minicpm3",
        "decoder",
        "MiniCPM3Config",
        dict(MLA, head_dim=16, q_lora_rank=16),
    ),
    Arch(
        "flex_olmo",
        "decoder-moe",
        "FlexOlmoConfig",
        dict(DECODER_ANY, pad_token_id=0, num_experts=4, num_experts_per_tok=2),
    ),
    Arch("glm4", "decoder", "Glm4Config", dict(DECODER_ANY, pad_token_id=0)),
    Arch(
        "eurobert",
        "encoder",
        "EuroBertConfig",
        dict(BERT_LIKE, pad_token_id=0, bos_token_id=1, eos_token_id=2, num_key_value_heads=2),
    ),
    Arch(
        "granitemoehybrid",
        "ssm",
        "GraniteMoeHybridConfig",
        dict(
            DECODER_ANY,
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_d_state=16,
            mamba_n_groups=1,
            layer_types=["mamba", "attention"],
            num_local_experts=4,
            num_experts_per_tok=2,
        ),
    ),
    Arch(
        "bamba",
        "ssm",
        "BambaConfig",
        dict(
            DECODER_ANY,
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_d_state=16,
            mamba_n_groups=1,
            attn_layer_indices=[1],
        ),
    ),
    Arch(
        "xmod",
        "encoder",
        "XmodConfig",
        dict(BERT_LIKE, languages=["en_XX"], default_language="en_XX"),
    ),
    Arch(
        "pvt",
        "vision",
        "PvtConfig",
        dict(PYRAMID, sequence_reduction_ratios=[8, 4, 2, 1], image_size=32),
        inputs="pixels",
    ),
    Arch(
        "pvt_v2",
        "vision",
        "PvtV2Config",
        dict(PYRAMID, sr_ratios=[8, 4, 2, 1], image_size=32),
        inputs="pixels",
    ),
    Arch(
        "glpn",
        "vision",
        "GLPNConfig",
        dict(PYRAMID, decoder_hidden_size=16),
        inputs="pixels",
    ),
    Arch(
        "yolos",
        "vision",
        "YolosConfig",
        dict(VISION_ANY, image_size=[32, 32], num_detection_tokens=4),
        inputs="pixels",
    ),
    Arch(
        "qwen3_next",
        "decoder-moe",
        "Qwen3NextConfig",
        dict(
            DECODER_ANY,
            layer_types=["linear_attention", "full_attention"],
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
        ),
    ),
    Arch(
        "recurrent_gemma",
        "ssm",
        "RecurrentGemmaConfig",
        dict(
            DECODER_ANY,
            block_types=["recurrent", "attention"],
            lru_width=32,
            attention_window_size=16,
        ),
    ),
    Arch(
        "deepseek_v3",
        "decoder-moe",
        "DeepseekV3Config",
        dict(
            MLA,
            head_dim=8,
            q_lora_rank=16,
            n_routed_experts=4,
            n_shared_experts=1,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
        ),
    ),
    Arch(
        "longcat_flash",
        "decoder-moe",
        "LongcatFlashConfig",
        dict(
            MLA,
            head_dim=8,
            q_lora_rank=16,
            n_routed_experts=4,
            moe_topk=2,
            expert_ffn_hidden_size=32,
            ffn_hidden_size=64,
            num_layers=1,
        ),
    ),
    Arch(
        "prophetnet",
        "seq2seq",
        "ProphetNetConfig",
        dict(  # not SEQ2SEQ: its encoder_layers set num_hidden_layers, which ProphetNet refuses
            vocab_size=VOCAB,
            max_position_embeddings=64,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=0,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            hidden_size=32,
            num_encoder_layers=1,
            num_decoder_layers=1,
            num_encoder_attention_heads=2,
            num_decoder_attention_heads=2,
            ngram=2,
        ),
        inputs="seq2seq",
    ),
    Arch(
        "convnextv2",
        "vision-cnn",
        "ConvNextV2Config",
        dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
        "pixels",
    ),
    Arch(
        "hiera",
        "vision",
        "HieraConfig",
        dict(
            image_size=[32, 32],
            patch_size=[3, 3],
            patch_stride=[2, 2],
            patch_padding=[1, 1],
            embed_dim=16,
            num_heads=[1, 1, 1, 1],
            depths=[1, 1, 1, 1],
            query_stride=[2, 2],
            masked_unit_size=[8, 8],
        ),
        "pixels",
    ),
]
"""The breadth suite's architectures, by family."""


BY_NAME: dict[str, Arch] = {a.name: a for a in ARCHS}
