// OrbitMQ console: the cluster page's charts (uPlot, served by the console itself).
// Reads /api/brokers/series every sample interval and draws, per broker, messages per second
// (when the broker reports putTps / getTransferedTps) and the commit log's growth in bytes/s.
(function () {
  "use strict";
  const box = document.getElementById("charts");
  if (!box || typeof uPlot === "undefined") return;
  const every = Math.max(Number(box.dataset.interval) || 5000, 1000);
  const charts = new Map();

  function chart(key, title, labels, colors, data) {
    let entry = charts.get(key);
    if (!entry) {
      const holder = document.createElement("div");
      holder.className = "chart";
      holder.dataset.chart = key;
      const heading = document.createElement("h3");
      heading.textContent = title;  // text, never markup
      holder.appendChild(heading);
      box.appendChild(holder);
      const series = [{}].concat(labels.map((label, i) => ({ label: label, stroke: colors[i], width: 2 })));
      const plot = new uPlot({ width: 540, height: 200, series: series, axes: [{}, { size: 70 }] }, data, holder);
      entry = { plot: plot };
      charts.set(key, entry);
    } else {
      entry.plot.setData(data);
    }
  }

  async function refresh() {
    let answer;
    try {
      answer = await fetch(box.dataset.src, { credentials: "same-origin", headers: { Accept: "application/json" } });
    } catch (e) { return; }
    if (!answer.ok) return;
    const brokers = await answer.json();
    let fewest = Infinity;
    for (const [addr, b] of Object.entries(brokers)) {
      const name = b.broker + " (" + b.role + ", " + addr + ")";
      fewest = Math.min(fewest, b.t.length);
      if (b.put_tps || b.get_tps) {
        chart(addr + "/tps", name + ": messages/s", ["put", "get"], ["#2455c3", "#12b76a"],
              [b.t, b.put_tps || b.t.map(() => null), b.get_tps || b.t.map(() => null)]);
      }
      chart(addr + "/bytes", name + ": commit log growth, bytes/s", ["bytes/s"], ["#f79009"],
            [b.t, b.write_bytes_per_s]);
    }
    box.dataset.points = String(fewest === Infinity ? 0 : fewest);
  }

  refresh();
  setInterval(refresh, every);
})();
