// The charts: recent deliveries' outcomes over time (stacked bars in inline SVG, one per
// time slice, drawn from the records the delivery log returns), and a subscription's last 24
// hours as its health tells them (contract section 20). Each caption says the same in words,
// so a chart is never the only way to read it.

const SVG = 'http://www.w3.org/2000/svg';
export const OUTCOMES = ['succeeded', 'failed', 'pending', 'skipped'];
const SLICES = 24;
const WIDTH = 720;
const HEIGHT = 180;
const PLOT = { left: 36, right: 8, top: 10, bottom: 28 };

function svg(name, attributes = {}, ...children) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  element.append(...children);
  return element;
}

/** Counts of each outcome in `SLICES` equal slices from the oldest record to `now`. */
function slices(deliveries, now) {
  const times = deliveries.map((d) => Date.parse(d.createdAt));
  // At least half a minute, so a new subscription's first deliveries are not one wide bar.
  const start = Math.min(now - 30_000, ...times);
  const width = (now - start) / SLICES;
  const counts = Array.from({ length: SLICES }, (_, index) => ({
    from: start + index * width,
    to: start + (index + 1) * width,
    succeeded: 0,
    failed: 0,
    pending: 0,
    skipped: 0,
  }));
  deliveries.forEach((delivery, n) => {
    const index = Math.min(SLICES - 1, Math.max(0, Math.floor((times[n] - start) / width)));
    counts[index][delivery.status] += 1;
  });
  return counts;
}

function clock(time, withDate) {
  const options = withDate
    ? { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' }
    : { hour: '2-digit', minute: '2-digit', second: '2-digit' };
  return new Date(time).toLocaleString(undefined, options);
}

/** Replaces the content of `figure` with the chart of `deliveries` (newest first) up to `now`. */
export function drawOutcomes(figure, deliveries, now = Date.now()) {
  const caption = document.createElement('figcaption');
  if (deliveries.length === 0) {
    caption.textContent = 'No deliveries yet: send a test ping to see one here.';
    figure.replaceChildren(caption);
    return;
  }
  const counts = slices(deliveries, now);
  const totals = Object.fromEntries(OUTCOMES.map((o) => [o, deliveries.filter((d) => d.status === o).length]));
  const highest = Math.max(1, ...counts.map((slice) => OUTCOMES.reduce((sum, o) => sum + slice[o], 0)));
  const withDate = now - counts[0].from > 86_400_000;
  const plotWidth = WIDTH - PLOT.left - PLOT.right;
  const plotHeight = HEIGHT - PLOT.top - PLOT.bottom;
  const barWidth = plotWidth / SLICES;
  const scale = plotHeight / highest;

  const summary = OUTCOMES.filter((o) => totals[o] > 0).map((o) => `${totals[o]} ${o}`).join(', ');
  const label = `Outcomes of the last ${deliveries.length} deliveries from ${clock(counts[0].from, withDate)} `
    + `to ${clock(now, withDate)}: ${summary}.`;
  const chart = svg('svg', {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: 'img',
    'aria-label': label,
    class: 'outcomes',
    preserveAspectRatio: 'xMidYMid meet',
  });
  const baseline = PLOT.top + plotHeight;
  chart.append(
    svg('line', { x1: PLOT.left, x2: WIDTH - PLOT.right, y1: baseline, y2: baseline, class: 'axis' }),
    svg('text', { x: PLOT.left - 6, y: PLOT.top + 8, 'text-anchor': 'end', class: 'tick' }, String(highest)),
    svg('text', { x: PLOT.left - 6, y: baseline, 'text-anchor': 'end', class: 'tick' }, '0'),
    svg('text', { x: PLOT.left, y: HEIGHT - 8, class: 'tick' }, clock(counts[0].from, withDate)),
    svg('text', { x: WIDTH - PLOT.right, y: HEIGHT - 8, 'text-anchor': 'end', class: 'tick' }, clock(now, withDate)),
  );
  counts.forEach((slice, index) => {
    let top = baseline;
    for (const outcome of OUTCOMES) {
      if (slice[outcome] === 0) continue;
      const height = slice[outcome] * scale;
      top -= height;
      const tip = `${clock(slice.from, withDate)}–${clock(slice.to, withDate)}: ${slice[outcome]} ${outcome}`;
      chart.append(svg('rect', {
        x: PLOT.left + index * barWidth + 1,
        y: top,
        width: Math.max(1, barWidth - 2),
        height,
        class: `bar ${outcome}`,
        'data-outcome': outcome,
      }, svg('title', {}, tip)));
    }
  });

  const legend = document.createElement('ul');
  legend.className = 'legend';
  for (const outcome of OUTCOMES) {
    const item = document.createElement('li');
    const swatch = svg('svg', { width: 12, height: 12, 'aria-hidden': 'true', focusable: 'false' },
      svg('rect', { width: 12, height: 12, class: `bar ${outcome}` }));
    item.append(swatch, ` ${outcome}: ${totals[outcome]}`);
    legend.append(item);
  }
  caption.textContent = label;
  figure.replaceChildren(chart, legend, caption);
}

/**
 * Replaces the content of `figure` with the last 24 hours of `health` (the answer of GET
 * /api/v1/webhooks/health): one bar of its attempts, succeeded and failed, and one of each
 * latency percentile, on a scale to the 95th.
 */
export function drawHealth(figure, health) {
  const { attempts, succeeded, failed, p50Ms, p95Ms } = health.last24h;
  const caption = document.createElement('figcaption');
  if (attempts === 0) {
    caption.textContent = 'No attempts in the last 24 hours.';
    figure.replaceChildren(caption);
    return;
  }
  const label = `Last 24 hours: ${attempts} attempts, ${succeeded} succeeded, ${failed} failed; `
    + `latency ${p50Ms} ms at the median, ${p95Ms} ms at the 95th percentile.`;
  const rowHeight = 28;
  const labelWidth = 120;
  const plotWidth = WIDTH - labelWidth - PLOT.right - 80;
  const chart = svg('svg', {
    viewBox: `0 0 ${WIDTH} ${rowHeight * 3 + 8}`,
    role: 'img',
    'aria-label': label,
    class: 'health',
    preserveAspectRatio: 'xMidYMid meet',
  });
  const row = (index, name, parts, text) => {
    const y = 4 + index * rowHeight;
    chart.append(svg('text', { x: labelWidth - 8, y: y + 17, 'text-anchor': 'end', class: 'tick' }, name));
    let x = labelWidth;
    for (const { width, outcome, tip } of parts) {
      if (width <= 0) continue;
      chart.append(svg('rect', { x, y: y + 4, width, height: rowHeight - 10, class: `bar ${outcome}`, 'data-outcome': outcome },
        svg('title', {}, tip)));
      x += width;
    }
    chart.append(svg('text', { x: x + 6, y: y + 17, class: 'tick' }, text));
  };
  row(0, 'Attempts', [
    { width: (succeeded / attempts) * plotWidth, outcome: 'succeeded', tip: `${succeeded} succeeded` },
    { width: (failed / attempts) * plotWidth, outcome: 'failed', tip: `${failed} failed` },
  ], String(attempts));
  const slowest = Math.max(1, p95Ms);
  row(1, 'Median', [{ width: (p50Ms / slowest) * plotWidth, outcome: 'pending', tip: `${p50Ms} ms` }], `${p50Ms} ms`);
  row(2, '95th percentile', [{ width: plotWidth, outcome: 'pending', tip: `${p95Ms} ms` }], `${p95Ms} ms`);
  caption.textContent = label;
  figure.replaceChildren(chart, caption);
}
