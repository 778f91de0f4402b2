// Plots: line charts with uPlot (bundled), histograms and scatter plots on a canvas.
"use strict";

const Plots = (() => {
  const K = Kameleon;
  const FONT = "11px system-ui, sans-serif";

  // A shaded band over [0, until] on the x axis (the warm-up), and dashed horizontal
  // lines at `levels`.
  function marks(until, levels) {
    return (u) => {
      const ctx = u.ctx;
      const { left, top, width, height } = u.bbox;
      ctx.save();
      if (until !== null && until > 0) {
        const x = Math.min(left + width, Math.max(left, u.valToPos(until + 0.5, "x", true)));
        if (x > left) {
          ctx.fillStyle = "rgba(120, 120, 120, 0.10)";
          ctx.fillRect(left, top, x - left, height);
        }
      }
      ctx.strokeStyle = "rgba(180, 40, 40, 0.7)";
      ctx.setLineDash([6, 4]);
      for (const level of levels) {
        const y = u.valToPos(level, "y", true);
        if (y >= top && y <= top + height) {
          ctx.beginPath();
          ctx.moveTo(left, y);
          ctx.lineTo(left + width, y);
          ctx.stroke();
        }
      }
      ctx.restore();
    };
  }

  // A line chart in `container`: x, then one series per entry of `series`
  // ({label, color}). Kept and updated in place while its series stay the same.
  class Lines {
    constructor(container, { yLabel, series, height = 200, until = null, levels = [], legend = false }) {
      this.container = container;
      this.shape = series.map((s) => s.label).join("|");
      this.until = until;
      const opts = {
        width: Math.max(240, container.clientWidth),
        height,
        legend: { show: legend, live: false },
        cursor: { drag: { x: true, y: false }, points: { show: false } },
        scales: { x: { time: false } },
        axes: [
          { label: "iteration", labelSize: 18, font: FONT, labelFont: FONT, size: 36 },
          { label: yLabel, labelSize: 18, font: FONT, labelFont: FONT, size: 56 },
        ],
        series: [
          { label: "iteration" },
          ...series.map((s) => ({ label: s.label, stroke: s.color, width: 1, points: { show: false } })),
        ],
        hooks: { draw: [(u) => marks(this.until, levels)(u)] },
      };
      this.plot = new uPlot(opts, [[], ...series.map(() => [])], container);
      container.dataset.series = String(series.length);
    }

    update(data, until = this.until) {
      this.until = until;
      this.plot.setData(data);
      this.container.dataset.points = String(data[0].length);
      this.container.dataset.last = data[0].length ? String(data[0][data[0].length - 1]) : "";
    }

    // Fit the plot to its container's width (a no-op when it fits).
    resize() {
      const width = Math.max(240, this.container.clientWidth);
      if (width !== this.plot.width) this.plot.setSize({ width, height: this.plot.height });
    }

    destroy() {
      this.plot.destroy();
    }
  }

  function sized(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const width = Math.max(200, canvas.clientWidth);
    const height = Math.max(120, canvas.clientHeight);
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = FONT;
    return { ctx, width, height };
  }

  function extent(values) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const v of values) {
      if (Number.isFinite(v)) {
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
    if (lo === Infinity) return null;
    if (lo === hi) return [lo - 0.5, hi + 0.5];
    return [lo, hi];
  }

  // A histogram of `values` (pooled draws) in `canvas`, titled `name`.
  function histogram(canvas, name, values, bins = 30) {
    const { ctx, width, height } = sized(canvas);
    const pad = { left: 8, right: 8, top: 18, bottom: 18 };
    ctx.fillStyle = "#333";
    ctx.fillText(name, pad.left, 12);
    const range = extent(values);
    if (!range) {
      ctx.fillStyle = "#888";
      ctx.fillText("no draws yet", pad.left, height / 2);
      return;
    }
    const [lo, hi] = range;
    const counts = new Array(bins).fill(0);
    for (const v of values) {
      if (Number.isFinite(v)) counts[Math.min(bins - 1, Math.floor(((v - lo) / (hi - lo)) * bins))]++;
    }
    const top = Math.max(...counts);
    const w = (width - pad.left - pad.right) / bins;
    const h = height - pad.top - pad.bottom;
    ctx.fillStyle = "#2f7f6b";
    counts.forEach((c, i) => {
      const bar = (c / top) * h;
      ctx.fillRect(pad.left + i * w + 0.5, pad.top + h - bar, Math.max(1, w - 1), bar);
    });
    ctx.fillStyle = "#555";
    ctx.fillText(K.num(lo), pad.left, height - 4);
    const label = K.num(hi);
    ctx.fillText(label, width - pad.right - ctx.measureText(label).width, height - 4);
  }

  // A scatter plot of points [x, y, chain] in `canvas`, coloured by chain.
  function scatter(canvas, xName, yName, points) {
    const { ctx, width, height } = sized(canvas);
    const pad = { left: 44, right: 10, top: 10, bottom: 30 };
    const padded = (r) => (r ? [r[0] - 0.03 * (r[1] - r[0]), r[1] + 0.03 * (r[1] - r[0])] : r);
    const xr = padded(extent(points.map((p) => p[0])));
    const yr = padded(extent(points.map((p) => p[1])));
    ctx.strokeStyle = "#bbb";
    ctx.strokeRect(pad.left, pad.top, width - pad.left - pad.right, height - pad.top - pad.bottom);
    ctx.fillStyle = "#333";
    ctx.fillText(xName, (width - ctx.measureText(xName).width) / 2, height - 4);
    ctx.save();
    ctx.translate(12, (height + ctx.measureText(yName).width) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(yName, 0, 0);
    ctx.restore();
    if (!xr || !yr) {
      ctx.fillStyle = "#888";
      ctx.fillText("no draws yet", pad.left + 8, height / 2);
      return;
    }
    const sx = (v) => pad.left + ((v - xr[0]) / (xr[1] - xr[0])) * (width - pad.left - pad.right);
    const sy = (v) => height - pad.bottom - ((v - yr[0]) / (yr[1] - yr[0])) * (height - pad.top - pad.bottom);
    for (const [x, y, chain] of points) {
      if (Number.isFinite(x) && Number.isFinite(y)) {
        ctx.fillStyle = K.color(chain, 0.55);
        ctx.fillRect(sx(x) - 1.5, sy(y) - 1.5, 3, 3);
      }
    }
    ctx.fillStyle = "#555";
    ctx.fillText(K.num(xr[0]), pad.left, height - pad.bottom + 12);
    const xhi = K.num(xr[1]);
    ctx.fillText(xhi, width - pad.right - ctx.measureText(xhi).width, height - pad.bottom + 12);
    ctx.fillText(K.num(yr[1]), 2, pad.top + 8);
    ctx.fillText(K.num(yr[0]), 2, height - pad.bottom);
  }

  return { Lines, histogram, scatter };
})();
