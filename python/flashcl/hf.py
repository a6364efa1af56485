"""FlashCL as a Hugging Face transformers attention implementation.

    import flashcl.hf
    flashcl.hf.register()                                  # once, as "opencl"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="opencl")
    # or model.set_attn_implementation("opencl")

The name has no "flash" in it on purpose: transformers takes any
implementation whose name contains "flash" for a FlashAttention kernel
package and tries to load it from its hub.

Registers an attention function through transformers' AttentionInterface
(called per layer with (batch, heads, seq, dim) tensors) and a mask function
through AttentionMaskInterface. As with FlashAttention-2 in transformers, no
4-D mask is built unless the batch has padding: causal masking, the sliding
window (`sliding_window` W: the last W keys, i.e. window (W - 1, 0)) and
softcap are the kernels' own, aligned bottom-right, which is also what each
generate() step with a KV cache needs (seqlen_q < seqlen_k). With padding the
boolean mask transformers builds is passed as FlashCL's mask. Sinks
(gpt-oss's s_aux) are passed through; dropout during training too.
"""
from . import extras


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      softcap=None, is_causal=None, s_aux=None, **kwargs):
    """transformers' attention-function signature; returns ((batch, seq, heads, dim) output, None)."""
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    window = (-1, -1)
    if sliding_window is not None:
        window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    mask = attention_mask
    if mask is not None and mask.dtype.is_floating_point:  # an additive mask from elsewhere: 0 = attend
        mask = mask == 0
    # (b, h, s, d) -> (b, s, h, d) is a view: FlashCL takes the strides as they are.
    out = extras.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), softmax_scale=scaling,
                           causal=causal, window_size=window, softcap=softcap or 0.0, dropout_p=dropout,
                           sinks=s_aux, mask=mask)
    return out, None


def attention_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None, attention_mask=None,
                   **kwargs):
    """None when there is no padding (the kernels mask by themselves), else transformers' 4-D boolean mask."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    if attention_mask is None or (attention_mask.shape[1] >= kv_length and bool(attention_mask[:, -kv_length:].all())):
        return None
    kwargs["allow_is_causal_skip"] = False  # a mask is what is wanted here
    return sdpa_mask(batch_size, q_length, kv_length, q_offset=q_offset, kv_offset=kv_offset,
                     mask_function=mask_function or causal_mask_function, attention_mask=attention_mask, **kwargs)


def register(name="opencl"):
    """Makes attn_implementation=name use FlashCL in every transformers model."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    return name
