"""The figures draw what their captions say: the plotted series are the card's and the panels' own numbers,
every panel has its title and legend, and the PNG written is the figure's full size."""

import struct

import numpy as np
import pytest

import alphagym.data.plots as data_plots
import alphagym.verifier.plots as verifier_plots
from alphagym.config import load_params
from alphagym.data.plots import stylized_figure
from alphagym.panel import Panel
from alphagym.verifier.plots import book_figure
from alphagym.verifier.verifier import Verifier


@pytest.fixture
def drawn(monkeypatch):
    """The figures handed to `save`, kept open for inspection (the real save still writes the PNG)."""
    figures = []

    def keep(save):
        def wrapper(fig, path):
            figures.append(fig)
            fig.canvas.draw()                # text and limits as written
            return save(fig, path)
        return wrapper

    monkeypatch.setattr(verifier_plots, "save", keep(verifier_plots.save))
    monkeypatch.setattr(data_plots, "save", keep(data_plots.save))
    return figures


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_book_figure_draws_the_cards_book(sim_panels, tmp_path, root, drawn):
    train = sim_panels[0].slice_days(0, 800)
    v = Verifier(train, load_params(root / "params.yaml"))
    formula = "rank(ts_std(volume, 20) / ts_mean(volume, 20))"
    card = v.score(formula)
    assert card.valid
    out = book_figure(card, v, tmp_path / "sub" / "book.png")
    assert _png_size(out) == (11 * 110, 8 * 110)
    (fig,) = drawn
    pnl, turnover, ic = fig.axes
    lines = _lines(pnl)
    assert {"gross", "net of costs", "market x 0.1"} <= set(lines)
    np.testing.assert_allclose(lines["net of costs"].get_ydata(), np.cumsum(card.pnl))
    gross = lines["gross"].get_ydata()
    assert gross[-1] > lines["net of costs"].get_ydata()[-1]          # costs only take away
    assert formula in pnl.get_title() and f"CPCV {card.channels['cpcv']:+.2f}" in pnl.get_title()
    assert len(turnover.get_lines()[0].get_ydata()) == len(card.pnl)
    assert turnover.get_ylabel() == "turnover" and ic.get_ylabel() == "IC (63d mean)"
    shaded = [p for p in pnl.patches if p.get_alpha() == 0.08]
    assert len(shaded) == v.cfg["cpcv"]["blocks"] // 2                  # every other CPCV block


def test_stylized_figure_compares_two_panels_fact_by_fact(sim_panels, tmp_path, drawn):
    a, b = sim_panels[0].slice_days(0, 800), sim_panels[0].slice_days(800, 1600)
    # the second panel's volume shuffled in time: no persistence left, so its curve must differ from the first's
    shuffled = np.random.default_rng(0).permutation(b["volume"])
    b = Panel(b.dates, b.tickers, b.sectors, {**b.fields, "volume": shuffled}, b.in_holdout)
    out = stylized_figure(a, b, tmp_path / "facts.png", title="two halves")
    assert _png_size(out) == (11 * 110, int(7.5 * 110))
    (fig,) = drawn
    assert fig._suptitle.get_text() == "two halves"
    tails, corr, vol, volume = fig.axes
    for ax, word in ((tails, "fat tails"), (corr, "regimes"), (vol, "vol clustering"), (volume, "persistence")):
        assert word in ax.get_title()
        assert {"real", "simulator"} <= {t.get_text() for t in ax.get_legend().get_texts()}
    # the log-volume autocorrelation drawn for the second panel is that panel's own
    lv = np.log(b["volume"])
    z = lv - np.nanmean(lv, axis=0)
    lag1 = np.nansum(z[1:] * z[:-1]) / np.nansum(z * z)
    drawn = {label: line.get_ydata()[0] for label, line in _lines(volume).items() if label != "normal"}
    assert drawn["simulator"] == pytest.approx(lag1, abs=0.05) and abs(drawn["simulator"]) < 0.2
    assert drawn["real"] > 0.5                                      # the first panel's volume persists
