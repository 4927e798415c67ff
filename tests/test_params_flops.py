"""FLOPs conventions checked by hand arithmetic on small models."""

from planner.cost.params_flops import flops_per_token
from planner.specs.model import from_config


def _tiny(**extra):
    cfg = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    cfg.update(extra)
    return from_config(cfg, name="tiny")


def test_causal_attention_term_averages_the_triangle():
    # a=4 heads, d=16; per layer non-causal 2*s*a*(d+d) = 2*8*4*32 = 2048, x2 layers = 4096.
    # Causal at s=8: queries see 1..8 keys, mean 4.5 -> 2*4.5*4*32*2 layers = 2304.
    flops = flops_per_token(_tiny(), 8)
    assert flops.attention_forward == 4096
    assert flops.attention_forward_causal == 2304


def test_sliding_layers_cap_the_context():
    # Both layers sliding with window 4 at s=8: non-causal context min(8,4)=4 -> 2*4*4*32*2 = 2048.
    # Causal: keys per query 1,2,3,4,4,4,4,4 -> sum 26, mean 3.25 -> 2*3.25*4*32*2 = 1664.
    spec = _tiny(model_type="mistral", sliding_window=4)
    flops = flops_per_token(spec, 8)
    assert flops.attention_forward == 2048
    assert flops.attention_forward_causal == 1664
