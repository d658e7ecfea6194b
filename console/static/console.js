// The console's behaviour: the plot (uPlot, zoom by dragging, every range asked of the server) and the
// live tail's pause. Polling of the overview and the tail is htmx's (hx-trigger in the pages).
"use strict";

(function () {
  let tailPaused = false;

  // A paused tail keeps its rows: its polls are cancelled before they are sent.
  document.addEventListener("htmx:beforeRequest", function (event) {
    const target = event.detail && event.detail.elt;
    if (tailPaused && target && target.id === "tail") {
      event.preventDefault();
    }
  });

  function setupTail() {
    const toggle = document.getElementById("tail-toggle");
    if (!toggle) return;
    toggle.addEventListener("click", function () {
      tailPaused = !tailPaused;
      toggle.textContent = tailPaused ? "Resume" : "Pause";
      toggle.setAttribute("aria-pressed", String(tailPaused));
    });
  }

  function plotUrl(el, from, to, width) {
    const params = new URLSearchParams({ tag: el.dataset.tag, column: el.dataset.column, width: String(width) });
    if (from) params.set("from", from);
    if (to) params.set("to", to);
    if (el.dataset.at) params.set("at", el.dataset.at);
    if (el.dataset.channel && el.dataset.channel !== "0") params.set("channel", el.dataset.channel);
    return el.dataset.url + "?" + params.toString();
  }

  // What every plot over time shares: a UTC time axis, and a drag across it that calls dragged(u, from, to)
  // with the window in Unix seconds (zooming the plot itself only if zooms).
  function overTime(dragged, zooms) {
    return {
      scales: { x: { time: true } },
      cursor: { drag: { x: true, y: false, setScale: zooms } },
      hooks: {
        setSelect: [
          function (u) {
            if (u.select.width < 2) return;
            dragged(u, u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x"));
          },
        ],
      },
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
    };
  }

  function setupPlot() {
    const el = document.getElementById("plot");
    const info = document.getElementById("plot-info");
    if (!el || typeof uPlot !== "function") return;
    let chart = null;

    function say(text) {
      if (info) info.textContent = text;
    }

    function show(data) {
      const width = Math.max(el.clientWidth, 300);
      const opts = {
        width: width,
        height: 320,
        axes: [{ label: "time (UTC)" }, { label: data.column }],
        series: [{ label: "time (UTC)" }, { label: data.column, stroke: "#1f6fb2", width: 1, points: { show: data.exact && data.points < 200 } }],
        ...overTime(function (u, lo, hi) {
          u.setSelect({ left: 0, width: 0 }, false);
          load(String(lo), String(hi));
        }, true),
      };
      if (chart) chart.destroy();
      chart = new uPlot(opts, [data.x, data.y], el);
      el.dataset.points = String(data.points);
      el.dataset.rows = String(data.rows);
      el.dataset.from = String(data.start);
      el.dataset.to = String(data.stop);
      const kind = data.exact ? "every row" : "min, max, first and last per pixel column";
      say(data.rows + " rows in range, " + data.points + " points (" + kind + "), " +
          Math.round(data.server_seconds * 1000) + " ms on the server. Drag across the plot to zoom in.");
      // The downloads take the range shown: the whole stream until a zoom narrows it (milliseconds
      // rounded outwards, so that no row shown is left out).
      for (const link of document.querySelectorAll("a[id^=download-]")) {
        const target = new URL(link.href, window.location.href);
        if (el.dataset.zoomed) {
          target.searchParams.set("from", new Date(Math.floor(data.start * 1e3)).toISOString());
          target.searchParams.set("to", new Date(Math.ceil(data.stop * 1e3)).toISOString());
        } else {
          target.searchParams.delete("from");
          target.searchParams.delete("to");
        }
        link.href = target.pathname + target.search;
      }
      const form = document.getElementById("plot-form");
      if (form) {
        form.elements["from"].value = new Date(data.start * 1e3).toISOString();
        form.elements["to"].value = new Date(data.stop * 1e3).toISOString();
      }
    }

    function load(from, to) {
      const width = Math.max(el.clientWidth, 300);
      el.dataset.zoomed = from || to ? "1" : "";
      say("Loading…");
      fetch(plotUrl(el, from, to, width), { credentials: "same-origin" })
        .then(function (response) {
          return response.json().then(function (body) { return { ok: response.ok, body: body }; });
        })
        .then(function (result) {
          if (!result.ok) {
            say(result.body.message || "the plot could not be made");
            el.dataset.error = result.body.message || "error";
            return;
          }
          show(result.body);
        })
        .catch(function (error) { say("the plot could not be loaded: " + error); });
    }

    const reset = document.getElementById("plot-reset");
    if (reset) reset.addEventListener("click", function () { load("", ""); });
    load(el.dataset.from, el.dataset.to);
  }

  const COLORS = ["#1f6fb2", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0f766e"];

  function getJson(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) throw new Error(body.message || "the server answered " + response.status);
        return body;
      });
    });
  }

  // A vibration stream: RMS per channel over time, and the spectrum of the window dragged across it.
  function setupVibration() {
    const rmsEl = document.getElementById("rms");
    const spectrumEl = document.getElementById("spectrum");
    if (!rmsEl || !spectrumEl || typeof uPlot !== "function") return;
    const rmsInfo = document.getElementById("rms-info");
    const spectrumInfo = document.getElementById("spectrum-info");
    let rmsChart = null;
    let spectrumChart = null;

    function url(base, extra) {
      const params = new URLSearchParams({ tag: rmsEl.dataset.tag, column: rmsEl.dataset.column });
      if (rmsEl.dataset.at) params.set("at", rmsEl.dataset.at);
      for (const [key, value] of Object.entries(extra)) if (value !== "") params.set(key, String(value));
      return base + "?" + params.toString();
    }

    function channelSeries(count, label) {
      const series = [{ label: label }];
      for (let c = 0; c < count; c++) series.push({ label: "channel " + c, stroke: COLORS[c % COLORS.length], width: 1 });
      return series;
    }

    function spectrumOf(from, to) {
      spectrumInfo.textContent = "Loading…";
      getJson(url(rmsEl.dataset.spectrumUrl, { from: from, to: to }))
        .then(function (data) {
          const width = Math.max(spectrumEl.clientWidth, 300);
          const opts = {
            width: width,
            height: 260,
            scales: { x: { time: false } },
            axes: [{ label: "frequency (Hz)" }, { label: "power spectral density (dB)" }],
            series: channelSeries(data.channels.length, "frequency (Hz)"),
          };
          // Decibels: a spectrum's peaks and its floor lie decades apart.
          const decibels = data.channels.map(function (ys) {
            return ys.map(function (y) { return y > 0 ? 10 * Math.log10(y) : null; });
          });
          if (spectrumChart) spectrumChart.destroy();
          spectrumChart = new uPlot(opts, [data.x, ...decibels], spectrumEl);
          spectrumEl.dataset.bins = String(data.x.length);
          spectrumEl.dataset.rows = String(data.rows);
          spectrumInfo.textContent = data.rows + " rows from " + new Date(data.start * 1e3).toISOString() + " to " +
            new Date(data.stop * 1e3).toISOString() + ", " + data.segments + " segments averaged (Welch), sampled at " +
            data.sample_rate + " Hz.";
        })
        .catch(function (error) { spectrumInfo.textContent = String(error.message || error); });
    }

    getJson(url(rmsEl.dataset.url, { width: Math.max(rmsEl.clientWidth, 300) }))
      .then(function (data) {
        const opts = {
          width: Math.max(rmsEl.clientWidth, 300),
          height: 260,
          axes: [{ label: "time (UTC)" }, { label: "RMS" }],
          series: channelSeries(data.channels.length, "time (UTC)"),
          ...overTime(function (u, lo, hi) {
            spectrumOf(new Date(lo * 1e3).toISOString(), new Date(hi * 1e3).toISOString());
          }, false),
        };
        rmsChart = new uPlot(opts, [data.x, ...data.channels], rmsEl);
        rmsEl.dataset.points = String(data.points);
        rmsInfo.textContent = data.rows + " rows, " + data.points + " pixel columns. Drag across the plot to take the spectrum of that window.";
      })
      .catch(function (error) { rmsInfo.textContent = String(error.message || error); });
    spectrumOf("", "");
  }

  // The history slider: it arrives in a fragment after the page, so it is wired when htmx puts it in.
  function setupHistory() {
    const slider = document.getElementById("history");
    const items = document.querySelectorAll("#history-list li");
    const label = document.getElementById("history-label");
    const at = document.getElementById("history-at");
    if (!slider || !items.length || slider.dataset.wired) return;
    slider.dataset.wired = "1";
    function say() {
      const item = items[Number(slider.value)];
      at.value = item.dataset.tid;
      label.textContent = item.dataset.time + " · " + item.textContent + " · " + item.dataset.tid;
    }
    slider.addEventListener("input", say);
    say();
  }
  document.addEventListener("htmx:afterSwap", setupHistory);

  document.addEventListener("DOMContentLoaded", function () {
    setupTail();
    setupPlot();
    setupVibration();
  });
})();
