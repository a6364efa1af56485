"""A real client: small transformers models with random weights (built from a config, nothing downloaded),
FlashCL registered as their attention implementation, against the same weights on SDPA (Llama, Mistral)
or eager attention (Gemma-2: transformers refuses SDPA there, as SDPA has no softcap).

Tolerances: float32 throughout. Logits within 2e-4 (absolute; they are O(1)) and parameter gradients
within 1e-4 of the largest gradient: two float32 implementations of the same model differ by summation
order in each of a few layers, about 1e-6 relative per op. generate() must give the same tokens.
"""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import flashcl.hf  # noqa: E402

IMPL = flashcl.hf.register()

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=256)


def llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL)), "sdpa"


def mistral():
    return transformers.MistralForCausalLM(transformers.MistralConfig(sliding_window=6, **SMALL)), "sdpa"


def gemma2():
    config = transformers.Gemma2Config(sliding_window=6, attn_logit_softcapping=2.0, final_logit_softcapping=30.0,
                                       query_pre_attn_scalar=16, **SMALL)
    return transformers.Gemma2ForCausalLM(config), "eager"


MODELS = {"llama": llama, "mistral": mistral, "gemma2": gemma2}


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
    out = model(input_ids=ids, attention_mask=mask, labels=ids)
    out.loss.backward()
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
