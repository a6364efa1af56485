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
through AttentionMaskInterface. No 4-D mask is built where the kernels' own
causal mask gives the same attention: a plain causal mask, or a sliding
window that hides no key yet, that transformers allows skipping (no or/and
masks, no packed sequences), no padding, and the last query at the last key
(the kernels align causal masks bottom-right; a static cache's empty slots
break that). A bidirectional mask (encoders, cross-attention) without
padding, where transformers allows skipping it, becomes one True behind
stride-0 dims: no mask and not causal for the kernels. Everywhere else (padding,
windows that hide keys, static caches, packed sequences, chunked or
bidirectional-overlay masks)
transformers' boolean mask is built and is the whole rule, as SDPA's
integration does; the kernels' causal mask and window are added only where
the mask already hides everything they would hide (checked once per mask
tensor, not while tracing), so they only skip tiles. An additive float mask
(older models' extended masks, (b, 1, 1, sk) broadcast too) and T5's
position_bias go to FlashCL's bias (detached: a backward that would train
a learned bias is refused, since FlashCL computes no bias gradient). Sinks
(gpt-oss's s_aux) are passed through; dropout during training too. Models
whose code bypasses AttentionInterface (Bloom, GPT-J, Falcon, MPT, ...) are
refused at construction, as transformers refuses SDPA for them.
"""
import weakref

import torch

from . import _torch, extras


def _symbolic(x):
    """Traced, fake or on the meta device: no values to branch on."""
    return _torch._symbolic((x,))


def _as_rows(x, q_len, kv_len):
    """A mask or bias as FlashCL takes it: a (b, 1|h, 1, sk) one (older models' extended masks) broadcast
    over the query rows, and rows contiguous (transformers expands masks with a stride-0 last dim)."""
    if x.dim() == 4 and x.shape[-2] == 1 and q_len > 1:
        x = x.expand(x.shape[0], x.shape[1], q_len, kv_len)
    return x if x.stride(-1) == 1 else x.contiguous()


# What a boolean mask leaves to the kernels' own masking, for the last few mask tensors seen: the same
# mask reaches every layer of a forward (a hybrid model alternates two), so each fact costs one pass
# over it per forward. Entries: (weak reference, the tensor's version, {(diagonal, upper): fact}).
_mask_facts = []


def _hides(mask, diagonal, upper):
    """Whether the mask hides every pair above (upper) or on and below (not upper) the diagonal."""

    def fact():
        part = torch.triu(mask, diagonal=diagonal) if upper else torch.tril(mask, diagonal=diagonal)
        return not bool(part.any())

    if mask.is_inference():  # (made under torch.inference_mode: no version counter to tell a change by)
        return fact()
    entry = next((e for e in _mask_facts if e[0]() is mask and e[1] == mask._version), None)
    if entry is None:
        entry = (weakref.ref(mask), mask._version, {})
        _mask_facts[:] = [e for e in _mask_facts[-3:] if e[0]() is not None] + [entry]
    key = (diagonal, upper)
    if key not in entry[2]:
        entry[2][key] = fact()
    return entry[2][key]


def _window_candidate(module, sliding_window):
    """The layer's sliding window where known: given, the module's, or its config's (used only where the
    mask is checked to hide everything outside it already)."""
    if sliding_window is not None:
        return sliding_window
    w = getattr(module, "sliding_window", None)
    return w if w is not None else getattr(getattr(module, "config", None), "sliding_window", None)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      softcap=None, is_causal=None, s_aux=None, position_bias=None, **kwargs):
    """transformers' attention-function signature; returns ((batch, seq, heads, dim) output, None)."""
    q_len, kv_len = query.shape[2], key.shape[2]
    bias = None
    learned = []  # (what, tensor): additive biases with a gradient, which FlashCL does not compute
    if position_bias is not None:  # T5's relative attention bias (its padding mask included)
        bias = _as_rows(position_bias.detach().float(), q_len, kv_len)  # (T5 builds it from a (q, k, h) table)
        learned.append(("position_bias", position_bias))
    mask = attention_mask
    if mask is None:  # the kernels' own masking (attention_mask() said it suffices)
        causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        window = (-1, -1)
        if sliding_window is not None:
            window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    else:  # the mask is the whole rule; flags that change nothing only skip tiles
        window, causal = (-1, -1), False
        if mask.dtype.is_floating_point:  # an additive mask: 0 attends, large negatives hide
            added = _as_rows(mask.detach().float(), q_len, kv_len)
            learned.append(("the float attention_mask", mask))
            bias, mask = (added if bias is None else bias + added), None
        elif _all_visible_sentinel(mask):
            mask = None
        else:
            if q_len > 1 and not _symbolic(mask):
                causal = _hides(mask, kv_len - q_len + 1, True)
                w = _window_candidate(module, sliding_window)
                if causal and w is not None and _hides(mask, kv_len - q_len - w, False):
                    window = (w - 1, 0)
            mask = _as_rows(mask, q_len, kv_len)
    # (b, h, s, d) -> (b, s, h, d) is a view: FlashCL takes the strides as they are.
    out = extras.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), softmax_scale=scaling,
                           causal=causal, window_size=window, softcap=softcap or 0.0, dropout_p=dropout,
                           sinks=s_aux, mask=mask, bias=bias)
    # Learned biases (T5's or a conformer's position_bias, BEiT's relative position bias or Doge's dynamic
    # mask in the float attention_mask) go to the kernels detached: training one is refused by name.
    for what, tensor in learned:
        out = _torch.refuse_backward(out, f"{what} is a learned attention bias and needs a gradient, which FlashCL "
                                          "does not compute: train this model with attn_implementation='sdpa' or "
                                          "'eager' (inference with FlashCL works)", (tensor,))
    return out, None


def _kernels_mask_suffices(kv_length, q_length, q_offset, kv_offset, attention_mask, kwargs):
    """Whether the kernels' causal mask (bottom-right) gives the mask transformers asks for. Sliding
    windows are built into the mask as soon as they hide a key (as SDPA's integration does): some
    models (PhiMoE, Qwen2-MoE) pass their window only through the mask."""
    if kwargs.get("allow_is_causal_skip") is not True:  # bidirectional, or/and masks, packed sequences
        return False
    local = kwargs.get("local_size")
    if local is not None and (kv_length > local or local != getattr(kwargs.get("config"), "sliding_window", None)):
        return False  # a window that hides keys, or chunked attention (Llama 4)
    if isinstance(q_offset, torch.Tensor) or isinstance(kv_offset, torch.Tensor):
        return False  # a static cache's position under torch.compile: no value to read
    if q_offset + q_length != kv_offset + kv_length:
        return False  # keys past the last query (a static cache's empty slots): not bottom-right
    return _nothing_padded(attention_mask, kv_offset, kv_length)


def _nothing_padded(attention_mask, kv_offset, kv_length):
    """Whether the 2-D padding mask (None: none) keeps every key of the range (not knowable while tracing)."""
    if attention_mask is None:
        return True
    if _symbolic(attention_mask) or attention_mask.dim() != 2 or attention_mask.shape[1] < kv_offset + kv_length:
        return False
    return bool(attention_mask[:, kv_offset:kv_offset + kv_length].all())


def _every_key_visible(kv_length, kv_offset, attention_mask, kwargs):
    """A bidirectional mask (encoders, cross-attention) that transformers allows skipping and that hides
    nothing: no padding, no window narrower than the keys."""
    if kwargs.get("allow_is_bidirectional_skip") is not True or kwargs.get("allow_is_causal_skip") is True:
        return False
    local = kwargs.get("local_size")
    return (local is None or kv_length < local) and _nothing_padded(attention_mask, kv_offset, kv_length)


def _all_visible_sentinel(mask):
    """Whether mask is attention_mask()'s "every key visible" answer: one True behind stride-0 dims."""
    return (mask.dtype == torch.bool and not _symbolic(mask)
            and all(s == 0 or n == 1 for s, n in zip(mask.stride(), mask.shape)) and bool(mask[(0,) * mask.dim()]))


def attention_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None, attention_mask=None,
                   **kwargs):
    """None where the kernels' own masking suffices (see the module's text), else transformers' 4-D boolean mask."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    if _kernels_mask_suffices(kv_length, q_length, q_offset, kv_offset, attention_mask, kwargs):
        return None
    if _every_key_visible(kv_length, kv_offset, attention_mask, kwargs):
        # Not None: with None the layer's is_causal would decide, and some encoders (Splinter) have none,
        # which reads as causal. A single True behind stride-0 dims costs no memory and says "no mask,
        # not causal" to attention_forward.
        device = kwargs.get("device") or (attention_mask.device if attention_mask is not None else "cpu")
        return torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device).expand(batch_size, 1, q_length, kv_length)
    kwargs["allow_is_causal_skip"] = False  # a mask is what is wanted here
    kwargs["allow_is_bidirectional_skip"] = False
    return sdpa_mask(batch_size, q_length, kv_length, q_offset=q_offset, kv_offset=kv_offset,
                     mask_function=mask_function or causal_mask_function, attention_mask=attention_mask, **kwargs)


def _bypasses(cls):
    """Whether the model class's code computes attention without AttentionInterface, on evidence:
    transformers' test reads a class's module source and answers False where it cannot (a class made
    in a notebook or by exec), so the first class up the MRO whose source can be read is asked."""
    import inspect
    import sys

    from transformers import PreTrainedModel

    for c in cls.__mro__:
        if c is PreTrainedModel or not issubclass(c, PreTrainedModel):
            break
        try:
            inspect.getsource(sys.modules[c.__module__])
        except (KeyError, OSError, TypeError):
            continue
        test = getattr(c, "_can_set_attn_implementation", None)
        return test is not None and not test()
    return False  # no readable code: let transformers decide


def _refuse_models_that_bypass_the_interface(name):
    """Older model families (Bloom, GPT-J, Falcon, MPT, GPT-Neo, CodeGen, XGLM, MPNet) compute attention
    in their own code and never call the AttentionInterface, yet still build their masks through the
    registered mask function: with a custom name they would run without FlashCL and with masks not meant
    for them (Bloom: wrong logits; others: KeyError). transformers refuses "sdpa" or "flex_attention"
    for them; this does the same for FlashCL's name, with transformers' own test of a model's code."""
    from transformers import PreTrainedModel

    current = PreTrainedModel.get_correct_attn_implementation
    names = getattr(current, "flashcl_names", None)
    if names is not None:  # already wrapped (another name registered)
        names.add(name)
        return

    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        if requested_attention in get_correct_attn_implementation.flashcl_names and _bypasses(type(self)):
            raise ValueError(
                f'{type(self).__name__} does not use transformers\' AttentionInterface, so attn_implementation='
                f'"{requested_attention}" (FlashCL) cannot run its attention: use "eager" (or "sdpa" where the '
                "model supports it)")
        return current(self, requested_attention, is_init_check)

    get_correct_attn_implementation.flashcl_names = {name}
    PreTrainedModel.get_correct_attn_implementation = get_correct_attn_implementation


def register(name="opencl"):
    """Makes attn_implementation=name use FlashCL in every transformers model that dispatches its attention
    through AttentionInterface (and refused, with a ValueError, by those that do not)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    _refuse_models_that_bypass_the_interface(name)
    return name
