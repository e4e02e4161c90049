"""Figure helpers: log-scale x axes carry tick labels at the grid's own values."""

from __future__ import annotations

from gencc.experiments.drawing import log_axes, pyplot


def test_log_axes_label_grid_values_without_collisions() -> None:
    plt = pyplot()
    fig, ax = plt.subplots()
    Ns = [20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640]
    ax.plot(Ns, [1.0 / n**3 for n in Ns])
    log_axes(ax, Ns)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    plt.close(fig)
    assert labels == ["20", "40", "80", "160", "320", "640"]
