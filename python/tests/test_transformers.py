"""A real client: small transformers models with random weights (built from a config, nothing downloaded),
FlashCL registered as their attention implementation, against the same weights on SDPA (Llama, Mistral)
or eager attention (Gemma-2: transformers refuses SDPA there, as SDPA has no softcap; gpt-oss, whose sinks SDPA
lacks; DeepSeek-V3's MLA).

Tolerances: float32 throughout. Logits within 2e-4 (absolute; they are O(1)) and parameter gradients
within 1e-4 of the largest gradient: two float32 implementations of the same model differ by summation
order in each of a few layers, about 1e-6 relative per op. generate() must give the same tokens.
"""
import copy
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import flashcl.extras  # noqa: E402
import flashcl.hf  # noqa: E402

IMPL = flashcl.hf.register()

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
KV = {k: v for k, v in SMALL.items() if k != "head_dim"}  # (each model's own head dim)
T = {k: v for k, v in KV.items() if k != "num_key_value_heads"}


def llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL)), "sdpa"


def mistral():
    return transformers.MistralForCausalLM(transformers.MistralConfig(sliding_window=6, **SMALL)), "sdpa"


def gemma2():
    config = transformers.Gemma2Config(sliding_window=6, attn_logit_softcapping=2.0, final_logit_softcapping=30.0,
                                       query_pre_attn_scalar=16, **SMALL)
    return transformers.Gemma2ForCausalLM(config), "eager"


def gpt_oss():
    """Sinks (s_aux, a learned logit per head in each softmax's denominator, trained through FlashCL's dsinks)
    and a sliding window on alternate layers."""
    config = transformers.GptOssConfig(sliding_window=6, num_local_experts=4, num_experts_per_tok=2, **SMALL)
    return transformers.GptOssForCausalLM(config), "eager"


def deepseek_v3():
    """MLA: queries and keys of 16 + 8 (rope) dims against values of 16 (d_v != d), as DeepSeek-V3's 192/128."""
    config = transformers.DeepseekV3Config(kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16,
                                           v_head_dim=16, moe_intermediate_size=32, n_routed_experts=4,
                                           num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1,
                                           **dict(KV, num_key_value_heads=4))
    return transformers.DeepseekV3ForCausalLM(config), "eager"


MODELS = {"llama": llama, "mistral": mistral, "gemma2": gemma2, "gpt_oss": gpt_oss, "deepseek_v3": deepseek_v3}


def build(name):
    torch.manual_seed(0)
    model, reference = MODELS[name]()
    with torch.no_grad():  # larger weights than the default init, so that softcap and the window matter
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return model.eval(), reference


def logits_and_grads(model, impl, ids, mask=None):
    model.set_attn_implementation(impl)
    model.zero_grad()
    with _flashcl_calls() as calls:
        out = model(input_ids=ids, attention_mask=mask, labels=ids)
        out.loss.backward()
    assert (calls.call_count > 0) == (impl == IMPL), f"{impl}: FlashCL called {calls.call_count} times"
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", list(MODELS))
def test_logits_and_gradients(name):
    model, reference = build(name)
    ids = torch.randint(0, 128, (2, 20), generator=torch.Generator().manual_seed(1))
    ref_logits, ref_grads = logits_and_grads(model, reference, ids)
    logits, grads = logits_and_grads(model, IMPL, ids)
    assert (logits - ref_logits).abs().max() < 2e-4
    assert set(grads) == set(ref_grads)
    scale = max(g.abs().max() for g in ref_grads.values())
    worst = max((grads[n] - ref_grads[n]).abs().max() / scale for n in grads)
    assert worst < 1e-4, f"parameter gradients differ by {worst:.3g} of the largest"


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_padded_batch(name):
    """Left padding: transformers' boolean mask goes to FlashCL's mask."""
    model, reference = build(name)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :5] = 0
    with torch.no_grad():
        model.set_attn_implementation(reference)
        ref = model(input_ids=ids, attention_mask=mask).logits
        model.set_attn_implementation(IMPL)
        got = model(input_ids=ids, attention_mask=mask).logits
    valid = mask.bool()
    assert (got[valid] - ref[valid]).abs().max() < 2e-4


def test_padded_batch_under_inference_mode():
    """A padded batch and generate() under torch.inference_mode(): the mask is an inference tensor, which has
    no version counter; reading it for the per-mask cache raised "Inference tensors do not track version
    counter". The same logits and tokens as under no_grad."""
    model, reference = build("mistral")
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :5] = 0
    kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        model.set_attn_implementation(reference)
        ref, want = model(input_ids=ids, attention_mask=mask).logits, model.generate(ids, attention_mask=mask, **kw)
    model.set_attn_implementation(IMPL)
    with torch.inference_mode():
        got, tokens = model(input_ids=ids, attention_mask=mask).logits, model.generate(ids, attention_mask=mask, **kw)
    valid = mask.bool()
    assert (got[valid] - ref[valid]).abs().max() < 2e-4 and torch.equal(tokens, want)

@pytest.mark.parametrize("name", list(MODELS))
def test_generate_with_kv_cache(name):
    model, reference = build(name)
    prompt = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0)
    with torch.no_grad():
        model.set_attn_implementation(reference)
        want = model.generate(prompt, **kw)
        model.set_attn_implementation(IMPL)
        got = model.generate(prompt, **kw)
    assert want.shape[1] == 9 + 12 and torch.equal(got, want)


def _flashcl_calls():
    """Counts the calls the hook makes into FlashCL's kernels (one per attention layer and forward): a
    comparison with a reference proves nothing unless FlashCL ran on its side only. (transformers 5.17's
    set_attn_implementation did not reach T5's encoder and decoder, so both sides ran eager attention.)"""
    return mock.patch.object(flashcl.extras, "attention", wraps=flashcl.extras.attention)


def _compare(reference_model, model, **inputs):
    """The largest |logit difference| between the two models on the same inputs; FlashCL must run in
    `model` and not in `reference_model`."""
    with torch.no_grad(), _flashcl_calls() as calls:
        want = reference_model(**inputs).logits
        assert calls.call_count == 0, "the reference implementation called FlashCL"
        got = model(**inputs).logits
        assert calls.call_count > 0, f"{type(model).__name__} never called FlashCL's attention"
    return (got - want).abs().max().item()


def _same_logits(model, reference, **inputs):
    with torch.no_grad(), _flashcl_calls() as calls:
        model.set_attn_implementation(reference)
        want = model(**inputs).logits
        assert calls.call_count == 0, "the reference implementation called FlashCL"
        model.set_attn_implementation(IMPL)
        got = model(**inputs).logits
        assert calls.call_count > 0, f"set_attn_implementation({IMPL!r}) did not reach {type(model).__name__}'s layers"
    return (got - want).abs().max().item()


def _tiny(model, config, **fields):
    """A factory of (model class, config) by the classes' names in transformers."""
    return lambda: (getattr(transformers, model), getattr(transformers, config)(**fields))


# More architectures as a user would bring them, each with its own attention code: logits of a left-padded
# batch against eager attention, and generate()'s tokens.
ARCHITECTURES = {
    "gpt2": _tiny("GPT2LMHeadModel", "GPT2Config", vocab_size=128, n_embd=64, n_layer=2, n_head=4),
    "gpt_neox (partial rotary)": _tiny("GPTNeoXForCausalLM", "GPTNeoXConfig", rotary_pct=0.25, **T),
    "phi3": _tiny("Phi3ForCausalLM", "Phi3Config", pad_token_id=0, **KV),
    "qwen3 (q/k norms)": _tiny("Qwen3ForCausalLM", "Qwen3Config", head_dim=32, **KV),
    "gemma3 (local and global layers)": _tiny("Gemma3ForCausalLM", "Gemma3TextConfig", head_dim=16, sliding_window=4,
                                              **KV),
    "cohere": _tiny("CohereForCausalLM", "CohereConfig", **KV),
    "opt": _tiny("OPTForCausalLM", "OPTConfig", vocab_size=128, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64),
    "starcoder2": _tiny("Starcoder2ForCausalLM", "Starcoder2Config", sliding_window=5, **KV),
    "olmo2": _tiny("Olmo2ForCausalLM", "Olmo2Config", **KV),
    "bert (encoder)": _tiny("BertModel", "BertConfig", **T),
    "whisper (encoder-decoder)": _tiny("WhisperForConditionalGeneration", "WhisperConfig", vocab_size=128, d_model=64,
                                       encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                       decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                       num_mel_bins=8, max_source_positions=16, max_target_positions=32,
                                       pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),
}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_other_architectures(name):
    cls, config = ARCHITECTURES[name]()
    torch.manual_seed(0)
    # Two models from copies of the config: transformers keeps the implementation in the config, so one shared
    # config would put both models on the last implementation set.
    reference = cls._from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    model = cls._from_config(copy.deepcopy(config), attn_implementation=IMPL).eval()
    model.load_state_dict(reference.state_dict())
    gen = torch.Generator().manual_seed(6)
    if name.startswith("whisper"):
        inputs = dict(input_features=torch.randn(2, 8, 32, generator=gen),
                      decoder_input_ids=torch.randint(3, 128, (2, 7), generator=gen))
        prompt = dict(input_features=inputs["input_features"])
    else:
        mask = torch.ones(2, 11, dtype=torch.long)
        mask[1, :3] = 0  # left padding
        inputs = prompt = dict(input_ids=torch.randint(3, 128, (2, 11), generator=gen), attention_mask=mask)
    with torch.no_grad(), _flashcl_calls() as calls:
        want = reference(**inputs)
        assert calls.call_count == 0, "the reference implementation called FlashCL"
        got = model(**inputs)
        assert calls.call_count > 0, f"{name} never called FlashCL's attention"
    want, got = (o.logits if hasattr(o, "logits") else o.last_hidden_state for o in (want, got))
    rows = inputs["attention_mask"].bool() if "attention_mask" in inputs else torch.ones(got.shape[:2], dtype=bool)
    assert (got[rows] - want[rows]).abs().max() < 2e-4
    if hasattr(model, "generate"):
        kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
        with torch.no_grad():
            assert torch.equal(model.generate(**prompt, **kw), reference.generate(**prompt, **kw))


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_generate_with_a_static_cache(name):
    """A static cache holds empty slots past the tokens so far: the last query is not at the last key,
    so the kernels' bottom-right causal mask alone would let rows see them; the mask is built."""
    model, reference = build(name)
    prompt = torch.randint(2, 128, (1, 6), generator=torch.Generator().manual_seed(4))
    kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=0, cache_implementation="static",
              output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        model.set_attn_implementation(reference)
        want = model.generate(prompt, **kw)
        model.set_attn_implementation(IMPL)
        got = model.generate(prompt, **kw)
    assert torch.equal(got.sequences, want.sequences)
    assert max((a - b).abs().max().item() for a, b in zip(got.scores, want.scores)) < 2e-4


def test_packed_sequences():
    """Padding-free training batches: two sequences in one row, position_ids restarting, no
    attention_mask. transformers' mask keeps them apart; the kernels' causal mask alone would not."""
    model, reference = build("llama")
    ids = torch.randint(0, 128, (1, 20), generator=torch.Generator().manual_seed(5))
    position_ids = torch.cat([torch.arange(8), torch.arange(12)])[None]
    # (transformers detects packing only without a cache)
    assert _same_logits(model, reference, input_ids=ids, position_ids=position_ids, use_cache=False) < 2e-4


def test_t5_position_bias():
    """T5's relative attention bias (position_bias) goes to FlashCL's bias; training it needs a gradient
    FlashCL does not compute, which is refused."""
    config = transformers.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=1, num_heads=4,
                                   decoder_start_token_id=0)
    # Two models with the same weights, the implementation given at construction: T5's encoder and decoder
    # copy the config, and set_attn_implementation did not reach them in every transformers 5 release.
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration._from_config(config, attn_implementation=IMPL).eval()
    eager = transformers.T5ForConditionalGeneration._from_config(config, attn_implementation="eager").eval()
    eager.load_state_dict(model.state_dict())
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(6))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 9:] = 0
    assert _compare(eager, model, input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :7]) < 2e-4
    model(input_ids=ids, decoder_input_ids=ids[:, :7])  # evaluation with grad mode on: fine
    model.train()
    with pytest.raises(NotImplementedError, match="position_bias"):
        labels = ids[:, :7].contiguous()
        model(input_ids=ids, decoder_input_ids=labels, labels=labels).loss.backward()


def test_broadcast_additive_mask():
    """Older models pass an additive (b, 1, 1, sk) mask (0 attends, the dtype's minimum hides); it is
    the whole rule, broadcast over the rows, with no causal mask of the kernels'."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 16) for _ in range(3))  # (b, h, s, d), as transformers calls it
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 4:] = False
    additive = torch.zeros(2, 1, 1, 6).masked_fill(~keep[:, None, None, :], torch.finfo(torch.float32).min)

    class Encoder(torch.nn.Module):  # no is_causal attribute
        pass

    got, _ = flashcl.hf.attention_forward(Encoder(), q, k, v, additive, scaling=0.25)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], scale=0.25)
    assert (got - want.transpose(1, 2)).abs().max() < 1e-5


def test_window_passed_only_through_the_mask():
    """Qwen2-MoE builds sliding-window masks but does not pass its window to the attention function:
    once the window hides keys, the mask is built (the kernels' causal mask alone attended to all)."""
    config = transformers.Qwen2MoeConfig(use_sliding_window=True, sliding_window=4, max_window_layers=2,
                                         num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=32, **SMALL)
    torch.manual_seed(0)
    model = transformers.Qwen2MoeForCausalLM(config).eval()
    assert any(t == "sliding_attention" for t in config.layer_types)
    ids = torch.randint(0, 128, (1, 20), generator=torch.Generator().manual_seed(7))
    assert _same_logits(model, "sdpa", input_ids=ids) < 2e-4


def test_fake_tensors_through_the_hook():
    """FakeTensorMode (shape-only tracing) with a padding mask: no data-dependent check on fake values."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    model, _ = build("llama")
    model.set_attn_implementation(IMPL)
    with FakeTensorMode(allow_non_fake_inputs=True):
        ids = torch.zeros(2, 10, dtype=torch.long)
        mask = torch.ones(2, 10, dtype=torch.long)
        logits = model(input_ids=ids, attention_mask=mask).logits
    assert tuple(logits.shape) == (2, 10, 128)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_encoder_and_cross_attention_masks(padded, monkeypatch):
    """BART: a bidirectional encoder, causal decoder self-attention and cross-attention. Without padding
    no mask is built (the layers' is_causal decides, as with SDPA); with padding the mask is passed."""
    config = transformers.BartConfig(vocab_size=128, d_model=64, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64)
    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(config).eval()
    ids = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(8))
    inputs = dict(input_ids=ids, decoder_input_ids=ids[:, :5])
    if padded:
        inputs["attention_mask"] = torch.ones(2, 9, dtype=torch.long)
        inputs["attention_mask"][1, 6:] = 0
    masks = []
    attention = flashcl.hf.extras.attention
    monkeypatch.setattr(flashcl.hf.extras, "attention",
                        lambda *a, **kw: masks.append(kw.get("mask") is not None) or attention(*a, **kw))
    assert _same_logits(model, "eager", **inputs) < 2e-4
    # encoder, decoder self-attention, cross-attention: the padding mask reaches the two that see the encoder's keys
    assert masks == ([True, False, True] if padded else [False, False, False])


def test_encoder_without_is_causal():
    """Splinter's attention layers have no is_causal attribute (which reads as causal); unpadded, its
    bidirectional mask is skipped all the same and the encoder stays bidirectional."""
    config = transformers.SplinterConfig(vocab_size=128, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                         intermediate_size=64)
    torch.manual_seed(0)
    model = transformers.SplinterModel(config).eval()
    ids = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        model.set_attn_implementation("eager")
        want = model(input_ids=ids).last_hidden_state
        model.set_attn_implementation(IMPL)
        got = model(input_ids=ids).last_hidden_state
    assert (got - want).abs().max().item() < 2e-4


def test_models_that_bypass_the_attention_interface_are_refused():
    """Bloom computes attention in its own code: FlashCL's name is refused at construction (as transformers
    refuses SDPA for it), instead of running Bloom with masks meant for FlashCL (wrong logits)."""
    config = transformers.BloomConfig(vocab_size=128, hidden_size=64, n_layer=1, n_head=4)
    with pytest.raises(ValueError, match="BloomForCausalLM does not use transformers' AttentionInterface"):
        transformers.BloomForCausalLM._from_config(config, attn_implementation=IMPL)


def test_learned_float_mask():
    """BEiT adds its learned relative position bias into the float mask: inference with grad mode on works
    (the bias is detached for the kernels), a backward that would train the bias is refused by name."""
    config = transformers.BeitConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                     image_size=32, patch_size=8, num_labels=5, use_relative_position_bias=True)
    torch.manual_seed(0)
    model = transformers.BeitForImageClassification(config).eval()
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(9))
    assert _same_logits(model, "eager", pixel_values=pixels) < 2e-4
    model.set_attn_implementation(IMPL)
    loss = model(pixel_values=pixels, labels=torch.tensor([1, 2])).loss  # grad mode on: no error yet
    with pytest.raises(NotImplementedError, match="the float attention_mask is a learned attention bias"):
        loss.backward()
