"""The preset registry's names and arguments, for `kformer list` without keras or a backend.

Written by `python -m tests.test_cli` from `kformer.models.get_preset`; tests/test_cli.py fails
when this copy differs from the registry (a preset added, removed or changed): rerun it then.
"""

PRESETS = {
    'bert_base': {
        'builder': 'bert', 'vocabulary_size': 30522, 'sequence_length': 512, 'num_segments': 2,
        'num_layers': 12, 'hidden_dim': 768, 'num_heads': 12, 'intermediate_dim': 3072,
    },
    'bert_mini': {
        'builder': 'bert', 'num_layers': 4, 'hidden_dim': 256, 'num_heads': 4, 'intermediate_dim': 1024,
    },
    'bert_small': {
        'builder': 'bert', 'num_layers': 4, 'hidden_dim': 512, 'num_heads': 8, 'intermediate_dim': 2048,
    },
    'bert_tiny': {
        'builder': 'bert', 'num_layers': 2, 'hidden_dim': 128, 'num_heads': 2, 'intermediate_dim': 512,
    },
    'conformer_l': {
        'builder': 'conformer_encoder', 'num_layers': 17, 'hidden_dim': 512, 'num_heads': 8,
        'kernel_size': 32,
    },
    'conformer_m': {
        'builder': 'conformer_encoder', 'num_layers': 16, 'hidden_dim': 256, 'num_heads': 4,
        'kernel_size': 32,
    },
    'conformer_s': {
        'builder': 'conformer_encoder', 'num_layers': 16, 'hidden_dim': 144, 'num_heads': 4,
        'kernel_size': 32,
    },
    'conformer_speech_tiny': {
        'builder': 'speech_recognizer', 'num_features': 40, 'num_layers': 4, 'hidden_dim': 96,
        'num_heads': 4, 'kernel_size': 15, 'intermediate_dim': 192, 'dropout': 0.1,
    },
    'gpt2_small': {
        'builder': 'causal_lm', 'vocabulary_size': 50257, 'sequence_length': 1024, 'dropout': 0.1,
        'hidden_dim': 768, 'num_layers': 12, 'num_heads': 12, 'intermediate_dim': 3072,
    },
    'gpt_mini': {
        'builder': 'causal_lm', 'vocabulary_size': 16000, 'sequence_length': 256, 'hidden_dim': 256,
        'num_layers': 4, 'num_heads': 4, 'intermediate_dim': 1024,
    },
    'gpt_moe_tiny': {
        'builder': 'causal_lm', 'vocabulary_size': 8000, 'sequence_length': 128, 'hidden_dim': 128,
        'num_layers': 2, 'num_heads': 2, 'intermediate_dim': 512, 'num_experts': 8, 'moe_every': 2,
        'top_k': 2, 'expert_intermediate_dim': 256,
    },
    'gpt_neo_125m': {
        'builder': 'causal_lm', 'vocabulary_size': 50257, 'sequence_length': 2048, 'hidden_dim': 768,
        'num_layers': 12, 'num_heads': 12, 'intermediate_dim': 3072, 'dropout': 0.0,
        'activation': 'gelu_approximate', 'attention_window': 256, 'attention_types': ('global', 'local'),
        'attention_scale': 1.0, 'use_qkv_bias': False,
    },
    'gpt_tiny': {
        'builder': 'causal_lm', 'vocabulary_size': 8000, 'sequence_length': 128, 'hidden_dim': 128,
        'num_layers': 2, 'num_heads': 2, 'intermediate_dim': 512,
    },
    'imdb_bigram': {
        'builder': 'text_classifier', 'hidden_dim': 64, 'num_heads': 2, 'intermediate_dim': 128,
        'num_layers': 2, 'ngram_buckets': 262144, 'mask_padding': False,
    },
    'imdb_small': {
        'builder': 'text_classifier', 'hidden_dim': 64, 'num_heads': 2, 'intermediate_dim': 128,
        'num_layers': 2,
    },
    'imdb_tiny': {
        'builder': 'text_classifier', 'hidden_dim': 32, 'num_heads': 2, 'intermediate_dim': 64,
        'num_layers': 1,
    },
    'transformer_base': {
        'builder': 'translator', 'vocabulary_size': 37000, 'sequence_length': 256, 'dropout': 0.1,
        'hidden_dim': 512, 'num_heads': 8, 'intermediate_dim': 2048, 'num_encoder_layers': 6,
        'num_decoder_layers': 6,
    },
    'transformer_big': {
        'builder': 'translator', 'vocabulary_size': 37000, 'sequence_length': 256, 'dropout': 0.3,
        'hidden_dim': 1024, 'num_heads': 16, 'intermediate_dim': 4096, 'num_encoder_layers': 6,
        'num_decoder_layers': 6,
    },
    'transformer_small': {
        'builder': 'translator', 'vocabulary_size': 16000, 'sequence_length': 128, 'hidden_dim': 256,
        'num_heads': 4, 'intermediate_dim': 1024, 'num_encoder_layers': 3, 'num_decoder_layers': 3,
    },
    'transformer_tiny': {
        'builder': 'translator', 'vocabulary_size': 8000, 'sequence_length': 64, 'hidden_dim': 64,
        'num_heads': 2, 'intermediate_dim': 128, 'num_encoder_layers': 2, 'num_decoder_layers': 2,
    },
    'vit_base_patch16_224': {
        'builder': 'vit', 'image_size': 224, 'patch_size': 16, 'num_classes': 1000, 'channels': 3,
        'dropout': 0.1, 'hidden_dim': 768, 'num_layers': 12, 'num_heads': 12, 'intermediate_dim': 3072,
    },
    'vit_conv_stem_cifar': {
        'builder': 'vit', 'image_size': 32, 'patch_size': 4, 'num_classes': 10, 'channels': 3,
        'stem_channels': (64, 128), 'hidden_dim': 192, 'num_layers': 5, 'num_heads': 3,
        'intermediate_dim': 384,
    },
    'vit_hybrid_cifar': {
        'builder': 'vit', 'image_size': 32, 'patch_size': 8, 'num_classes': 10, 'channels': 3,
        'stem_channels': (64, 128, 256), 'hidden_dim': 192, 'num_layers': 5, 'num_heads': 3,
        'intermediate_dim': 384,
    },
    'vit_large_patch16_224': {
        'builder': 'vit', 'image_size': 224, 'patch_size': 16, 'num_classes': 1000, 'channels': 3,
        'dropout': 0.1, 'hidden_dim': 1024, 'num_layers': 24, 'num_heads': 16, 'intermediate_dim': 4096,
    },
    'vit_small_cifar': {
        'builder': 'vit', 'image_size': 32, 'patch_size': 4, 'num_classes': 10, 'channels': 3,
        'hidden_dim': 192, 'num_layers': 6, 'num_heads': 3, 'intermediate_dim': 384,
    },
    'vit_tiny': {
        'builder': 'vit', 'image_size': 28, 'patch_size': 7, 'num_classes': 10, 'channels': 1,
        'hidden_dim': 64, 'num_layers': 4, 'num_heads': 4, 'intermediate_dim': 128,
    },
}
