from alphagym.config import load_params
from alphagym.data.plots import stylized_figure
from alphagym.verifier.plots import book_figure
from alphagym.verifier.verifier import Verifier


def test_figures_are_written(sim_panels, tmp_path, root):
    train = sim_panels[0].slice_days(0, 800)
    path = stylized_figure(train, sim_panels[0].slice_days(800, 1600), tmp_path / "facts.png")
    assert path.stat().st_size > 10_000 and path.read_bytes()[:4] == b"\x89PNG"
    v = Verifier(train, load_params(root / "params.yaml"))
    card = v.score("rank(ts_std(volume, 20) / ts_mean(volume, 20))")
    out = book_figure(card, v, tmp_path / "sub" / "book.png")
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"
