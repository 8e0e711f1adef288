"""A tiny causal LM (Llama architecture, random weights) with a small byte-level BPE tokenizer and a
ChatML chat template, written to a folder in well under a second: the local backend, PEFT and TRL
load it like any Hugging Face model, with no download and no GGUF conversion."""
from __future__ import annotations

from pathlib import Path

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = ['{"answer": "bullish", "reason": "sales rose"}', '{"answer": "neutral", "reason": "flat"}',
          '{"answer": "bearish", "reason": "sales fell"}', "We rate Acme a Buy. Sales fell 20 percent.",
          "Margins widened and guidance was raised; the stock trades at a discount."]


def write_tiny_lm(folder: Path, seed: int = 0, layers: int = 2, hidden: int = 64) -> Path:
    """Save the tiny model + tokenizer to `folder` (deterministic for a seed) and return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS * 20, trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                             show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=None, eos_token="<|im_end|>",
                                  pad_token="<|im_end|>", unk_token=None)
    tok.chat_template = CHATML
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=2048, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    folder = Path(folder)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
