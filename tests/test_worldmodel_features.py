import numpy as np

from alphagym.worldmodel.features import FeatureScaler, features_to_panel, make_features


def test_features_roundtrip_to_a_consistent_panel(sim_panels):
    p = sim_panels[0].slice_days(0, 300)
    f = make_features(p)
    start_close, start_volume = p["close"][0], p["volume"][0]
    body = p.slice_days(1, 300)
    back = features_to_panel(f[1:], start_close, start_volume, body)
    np.testing.assert_allclose(back["close"], body["close"], rtol=1e-10)
    np.testing.assert_allclose(back["open"], body["open"], rtol=1e-10)
    np.testing.assert_allclose(back["volume"], body["volume"], rtol=1e-9)
    np.testing.assert_allclose(np.log(back["high"] / back["low"]), np.log(body["high"] / body["low"]), atol=1e-10)
    assert (back["high"] >= np.maximum(back["open"], back["close"])).all()
    assert (np.minimum(back["open"], back["close"]) >= back["low"]).all() and (back["low"] > 0).all()


def test_decoded_noise_still_gives_valid_ohlc(sim_panels):
    p = sim_panels[0].slice_days(0, 100)
    rng = np.random.default_rng(0)
    raw = rng.normal(0, 0.03, (99, p.shape[1], 5))
    raw[..., 2] = rng.normal(0.0, 0.02, raw.shape[:2])          # even negative ranges are repaired
    back = features_to_panel(raw, p["close"][0], p["volume"][0], p.slice_days(1, 100))
    assert (back["high"] >= np.maximum(back["open"], back["close"])).all()
    assert (np.minimum(back["open"], back["close"]) >= back["low"]).all() and (back["low"] > 0).all()


def test_scaler_uses_given_window_only(sim_panels):
    f = make_features(sim_panels[0])
    s = FeatureScaler.fit(f[:500])
    z = s.transform(f[:500])
    np.testing.assert_allclose(np.nanmean(z, axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(s.inverse(z), f[:500], rtol=1e-12, atol=1e-14)
