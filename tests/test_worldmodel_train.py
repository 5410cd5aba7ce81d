"""The world model trains deterministically on a small panel; validation comes after training windows."""

import numpy as np

from alphagym import params as P
from alphagym.worldmodel.train import _split, build_windows, train_world_model

CFG = P.WorldModel.model_construct(   # the fields training reads, small
    window=16, stride=8, mask_share=0.25, mask_span=4, d_model=16, heads=2, time_layers=1, stock_layers=1, ema=0.9,
    geometry_weight=0.1, decoder_weight=1.0, batch_size=8, lr=3e-3, weight_decay=0.0, max_epochs=4, patience=10,
    val_share=0.2, threads=1)


def test_validation_windows_come_after_training_windows(sim_panels):
    p = sim_panels[0].slice_days(0, 300)
    z = np.zeros((300, p.shape[1], 5))
    data = build_windows(z, np.random.default_rng(0).normal(size=(300, p.shape[1])), 16, 8)
    tr, va = _split(data, 0.2, 16)
    assert data.starts[tr].max() + 32 <= data.starts[va].min()


def test_training_is_deterministic_and_learns(sim_panels):
    p = sim_panels[0].slice_days(0, 400)
    a = train_world_model(p, CFG, seed=3, progress=False)
    b = train_world_model(p, CFG, seed=3, progress=False)
    assert [h["val_total"] for h in a.history] == [h["val_total"] for h in b.history]
    assert a.history[-1]["train_recon"] < a.history[0]["train_recon"]
    assert set(a.validation) >= {"jepa_model", "jepa_persistence", "jepa_window_mean", "geometry_model"}
