// respools Usage page: a price per GPU-hour per pool changes the chargeback table's costs and the CSV
// link (and the page's own address, so a reload or a shared link keeps the prices). No framework.
"use strict";

(() => {
  const inputs = [...document.querySelectorAll("input.price[data-pool]")];
  const link = document.getElementById("chargeback-csv");
  const form = document.getElementById("usage-window");
  const totalCost = document.getElementById("total-cost");

  function prices() {
    const out = new Map();
    for (const input of inputs) {
      const text = input.value.trim();
      const price = Number(text);
      const valid = text === "" || (Number.isFinite(price) && price >= 0 && price < 1e9);
      input.setCustomValidity(valid ? "" : "a price per GPU-hour: a number, 0 or more");
      if (text !== "" && valid) out.set(input.dataset.pool, price);
    }
    return out;
  }

  function withPrices(href, priced) {
    const url = new URL(href, window.location.href);
    url.searchParams.delete("price");
    for (const [pool, price] of priced) url.searchParams.append("price", `${pool}=${price}`);
    return url.pathname + url.search + url.hash;
  }

  function update() {
    const priced = prices();
    let total = 0;
    let any = false;
    for (const row of document.querySelectorAll("table.chargeback tbody tr[data-pool]")) {
      const price = priced.get(row.dataset.pool);
      row.querySelector("td.price").textContent = price === undefined ? "—" : String(price);
      if (price === undefined) {
        row.querySelector("td.cost").textContent = "—";
        continue;
      }
      const cost = Number(row.dataset.gpuHours) * price;
      row.querySelector("td.cost").textContent = cost.toFixed(2);
      total += cost;
      any = true;
    }
    if (totalCost) totalCost.textContent = any ? total.toFixed(2) : "—";
    if (link) link.setAttribute("href", withPrices(link.getAttribute("href"), priced));
    window.history.replaceState(null, "", withPrices(window.location.href, priced));
    if (form) {
      for (const carried of form.querySelectorAll("input.price-carry")) carried.remove();
      for (const [pool, price] of priced) {
        const carried = document.createElement("input");
        Object.assign(carried, { type: "hidden", name: "price", className: "price-carry", value: `${pool}=${price}` });
        form.append(carried);
      }
    }
  }

  for (const input of inputs) input.addEventListener("input", update);
})();
