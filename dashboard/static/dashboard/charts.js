// Ackboard rate charts: draw the stream or group page's history with uPlot
// (vendor/uplot), switch ranges, and append the live points the socket pushes.
//
// The page holds a shell, section.rate-charts with data-chart-url (the chart-data JSON
// endpoint, dashboard/views/charts.py) and range buttons. This file fetches the JSON of
// the chosen range and draws one small chart per panel that has any known figure:
// produce vs consume rate, lag, oldest pending and undelivered age, failures per minute.
// A figure the server could not know is null and stays a gap, never a zero; the JSON's
// "note" says why (too little history, Redis older than 7) and is shown instead.
//
// Live: the page's pushed partials (group-summary, stream-facts) carry the sampler's
// latest point as JSON in #chart-point's data-point. After each swap (htmx:load) this
// reads it and, if it is newer than the last point by at least the range's step, appends
// it to the existing charts (uPlot setData) and drops what fell out of the range: no
// reload, no new chart. Operator actions from the audit trail are drawn as dashed
// vertical lines and listed under the charts, so cause and effect line up.
// Each chart's legend shows the latest values until the pointer is over a chart (then the
// values under it), and again when it leaves.
//
// No inline script or style: the Content-Security-Policy forbids them, and uPlot sets
// styles through the CSSOM only.
(() => {
  "use strict";

  const PANELS = [
    {
      title: "Rate (entries/s)",
      series: [
        ["produce_per_s", "produced", "--accent"],
        ["consume_per_s", "consumed", "--ok"],
      ],
    },
    { title: "Lag (entries)", series: [["lag", "lag", "--purple"]] },
    {
      title: "Age (s)",
      series: [
        ["oldest_pending_s", "oldest pending", "--warn"],
        ["undelivered_s", "oldest undelivered", "--bad"],
      ],
    },
    { title: "Failures per minute", series: [["failures_per_min", "failures/min", "--bad"]] },
  ];
  const HEIGHT = 130;
  // Colours are ackboard.css's custom properties (series, axes, grid, markers), read when
  // a chart is drawn: light or dark as the system asks; a change of theme redraws.
  const colour = (name) =>
    getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#6b7178";

  const pad = (n) => String(n).padStart(2, "0");
  const clock = (t) => {
    const d = new Date(t * 1000);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
  };

  // The legend shows the latest values, not uPlot's "--", whenever the cursor is not over
  // a chart (on load, after a live point, when the pointer leaves): for each series its
  // last known value (a gap at the end shows the value before it), with that point's time.
  function showLatest(u) {
    const idxs = u.data.map((column) => {
      for (let i = column.length - 1; i >= 0; i -= 1) if (column[i] !== null) return i;
      return null;
    });
    idxs[0] = u.data[0].length ? u.data[0].length - 1 : null;
    if (idxs[0] !== null) u.setLegend({ idxs });
  }

  function latestLegendPlugin() {
    return {
      hooks: {
        ready: [showLatest],
        setData: [(u) => { if (u.cursor.idx == null) showLatest(u); }],
        setLegend: [(u) => { if (u.legend.idx == null) showLatest(u); }],
      },
    };
  }

  // Dashed vertical lines at the operator actions' times, on every panel.
  function markersPlugin(chart) {
    return {
      hooks: {
        draw: [
          (u) => {
            const { ctx } = u;
            const { left, top, width, height } = u.bbox;
            ctx.save();
            ctx.strokeStyle = colour("--muted");
            ctx.lineWidth = Math.max(1, window.devicePixelRatio || 1);
            ctx.setLineDash([4, 3]);
            for (const m of chart.markers) {
              const x = Math.round(u.valToPos(m.t, "x", true));
              if (x < left || x > left + width) continue;
              ctx.beginPath();
              ctx.moveTo(x, top);
              ctx.lineTo(x, top + height);
              ctx.stroke();
            }
            ctx.restore();
          },
        ],
      },
    };
  }

  class RateChart {
    constructor(root) {
      this.root = root;
      this.url = root.dataset.chartUrl;
      this.range = root.dataset.range;
      this.panels = root.querySelector(".chart-panels");
      this.note = root.querySelector(".chart-note");
      this.markerList = root.querySelector(".chart-markers");
      this.plots = [];
      this.data = null;
      this.markers = [];
      this.sync = uPlot.sync(`rates:${this.url}`);
      this.request = 0;
      for (const button of root.querySelectorAll("button[data-range]")) {
        button.addEventListener("click", () => this.load(button.dataset.range));
      }
      let timer = 0;
      window.addEventListener("resize", () => {
        clearTimeout(timer);
        timer = setTimeout(() => this.resize(), 100);
      });
    }

    async load(range) {
      this.range = range;
      this.root.dataset.range = range;
      for (const button of this.root.querySelectorAll("button[data-range]")) {
        button.setAttribute("aria-pressed", String(button.dataset.range === range));
      }
      const request = ++this.request;
      this.root.dataset.state = "loading";
      let data;
      try {
        const response = await fetch(`${this.url}?range=${encodeURIComponent(range)}`, {
          headers: { Accept: "application/json" },
          credentials: "same-origin",
        });
        data = await response.json();
        if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
      } catch (error) {
        if (request !== this.request) return;
        this.clear();
        this.showNote(`Could not load the chart: ${error.message}`);
        this.root.dataset.state = "error";
        return;
      }
      if (request !== this.request) return; // a newer range was asked for meanwhile
      this.draw(data);
      const point = document.getElementById("chart-point");
      if (point) this.appendFrom(point); // pushed while the request ran
    }

    clear() {
      for (const { plot } of this.plots) {
        this.sync.unsub(plot);
        plot.destroy();
      }
      this.plots = [];
      this.panels.replaceChildren();
      this.markerList.replaceChildren();
      this.markerList.hidden = true;
    }

    showNote(text) {
      this.note.textContent = text;
      this.note.hidden = !text;
    }

    static width(box) {
      return Math.max(200, (box.clientWidth || 600) - 16);
    }

    columns(keys) {
      return [this.data.t, ...keys.map((key) => this.data.series[key])];
    }

    draw(data) {
      this.clear();
      this.data = data;
      this.markers = data.markers || [];
      this.showNote(data.note || "");
      this.root.dataset.state = data.enough ? "drawn" : "empty";
      this.root.dataset.points = String(data.t.length);
      if (!data.enough) return;
      // All boxes first, then the plots: each plot takes its box's width in the final layout.
      const made = [];
      for (const panel of PANELS) {
        const shown = panel.series.filter(([key]) => data.series[key].some((v) => v !== null));
        if (!shown.length) continue;
        const box = document.createElement("div");
        box.className = "chart-panel";
        box.dataset.panel = shown.map(([key]) => key).join(" ");
        const title = document.createElement("h3");
        title.textContent = panel.title;
        box.append(title);
        this.panels.append(box);
        made.push([box, shown]);
      }
      const grid = { stroke: colour("--chart-grid"), width: 1 };
      const axis = { stroke: colour("--chart-axis"), grid, ticks: grid };
      for (const [box, shown] of made) {
        const keys = shown.map(([key]) => key);
        const opts = {
          width: RateChart.width(box),
          height: HEIGHT,
          cursor: { sync: { key: this.sync.key } },
          legend: { live: true },
          scales: { x: { time: true } },
          series: [
            {},
            ...shown.map(([, label, stroke]) => ({
              label, stroke: colour(stroke), width: 1.5, spanGaps: false,
            })),
          ],
          axes: [{ ...axis }, { ...axis, size: 56 }],
          plugins: [markersPlugin(this), latestLegendPlugin()],
        };
        const plot = new uPlot(opts, this.columns(keys), box);
        this.sync.sub(plot);
        this.plots.push({ plot, keys, box });
      }
      this.listMarkers();
    }

    listMarkers() {
      this.markerList.replaceChildren();
      for (const m of this.markers) {
        const item = document.createElement("li");
        const when = document.createElement("time");
        when.dateTime = new Date(m.t * 1000).toISOString();
        when.textContent = clock(m.t);
        const what = document.createElement("strong");
        what.textContent = m.action;
        item.append(when, " ", what, ` by ${m.username}`);
        // The summary repeats the action's name first: show what it adds.
        const rest = m.summary.startsWith(m.action) ? m.summary.slice(m.action.length) : m.summary;
        if (rest.trim()) item.append(`: ${rest.trim()}`);
        this.markerList.append(item);
      }
      this.markerList.hidden = this.markers.length === 0;
    }

    // Appends a pushed point to the drawn charts, in place.
    appendFrom(element) {
      if (!this.data || !this.data.enough || !element.dataset.point) return;
      let point;
      try {
        point = JSON.parse(element.dataset.point);
      } catch {
        return;
      }
      const t = this.data.t;
      const last = t[t.length - 1];
      // A coarser range (7 d: one point per 10 min) takes a live point only a step on.
      if (!(point.t > last) || point.t - last < this.data.step_s * 0.9) return;
      t.push(point.t);
      for (const key of Object.keys(this.data.series)) {
        const value = point[key];
        this.data.series[key].push(value === undefined ? null : value);
      }
      const start = point.t - this.data.range_s;
      while (t.length > 2 && t[0] < start) {
        t.shift();
        for (const key of Object.keys(this.data.series)) this.data.series[key].shift();
      }
      for (const { plot, keys } of this.plots) {
        plot.setData(this.columns(keys));
      }
      this.root.dataset.points = String(t.length);
      this.root.dataset.lastT = String(point.t);
    }

    resize() {
      for (const { plot, box } of this.plots) {
        plot.setSize({ width: RateChart.width(box), height: HEIGHT });
      }
    }
  }

  const charts = [];
  document.addEventListener("DOMContentLoaded", () => {
    if (typeof uPlot === "undefined") return;
    for (const root of document.querySelectorAll("section.rate-charts[data-chart-url]")) {
      const chart = new RateChart(root);
      charts.push(chart);
      chart.load(chart.range);
    }
    window.matchMedia?.("(prefers-color-scheme: dark)").addEventListener("change", () => {
      for (const chart of charts) if (chart.data) chart.draw(chart.data);
    });
  });
  // A live push (or any htmx swap) brought new content: it may carry a newer point.
  document.addEventListener("htmx:load", (event) => {
    const element = event.detail?.elt;
    if (!element || !charts.length) return;
    const point = element.id === "chart-point" ? element : element.querySelector?.("#chart-point");
    if (!point) return;
    for (const chart of charts) chart.appendFrom(point);
  });
})();
