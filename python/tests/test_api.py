"""The FlashAttention-2 functions have flash_attn 2.x's signatures (names, order, defaults)."""
import inspect

import flashcl
import flashcl.flash_attn_interface as fai

COMMON = ("dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, "
          "deterministic=False, return_attn_probs=False")
FLASH_ATTN_2 = {
    "flash_attn_func": f"(q, k, v, {COMMON})",
    "flash_attn_qkvpacked_func": f"(qkv, {COMMON})",
    "flash_attn_kvpacked_func": f"(q, kv, {COMMON})",
    "flash_attn_varlen_func": f"(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, {COMMON}, "
                              "block_table=None)",
    "flash_attn_varlen_qkvpacked_func": f"(qkv, cu_seqlens, max_seqlen, {COMMON})",
    "flash_attn_varlen_kvpacked_func": f"(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, {COMMON})",
}


def test_signatures():
    for name, want in FLASH_ATTN_2.items():
        assert str(inspect.signature(getattr(fai, name))) == want, name
        assert getattr(flashcl, name) is getattr(fai, name)


KVCACHE = ("(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None, "
           "cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False, "
           "window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0, "
           "return_softmax_lse=False, *, k_scale=None, v_scale=None)")


def test_kvcache_signature():
    """flash_attn 2.x's flash_attn_with_kvcache, then FlashCL's keyword-only fp8 extras; merge_states is an extra."""
    assert str(inspect.signature(fai.flash_attn_with_kvcache)) == KVCACHE
    assert flashcl.flash_attn_with_kvcache is fai.flash_attn_with_kvcache
    assert callable(flashcl.merge_states) and not hasattr(fai, "merge_states")


def test_version():
    assert flashcl.__version__ == flashcl._flashcl.version() and flashcl.__version__.count(".") == 2
