// The attention page: one sentence in, its translation and the decoder's cross-attention out.
"use strict";

const $ = (id) => document.getElementById(id);
let current = null; // the last /v1/attention answer

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function post(path, body) {
  let response;
  try {
    response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch (e) {
    throw new Error("The server cannot be reached.");
  }
  let data = null;
  try { data = await response.json(); } catch (e) { /* not JSON: handled below */ }
  if (!response.ok) {
    const error = data && data.error;
    const field = error && error.field && error.field !== "body" ? `${error.field}: ` : "";
    throw new Error(error ? `${field}${error.message}` : `The server answered ${response.status}.`);
  }
  return data;
}

// A subword as shown. Byte-level BPE marks a word start with a leading space; a piece that continues the word
// before it gets a leading middle dot ("Gitarre" = "G" "·itar" "·re"); specials are greyed.
function tokenLabel(element, token, index) {
  if (token === "</s>") {
    element.textContent = "</s>";
    element.classList.add("special");
  } else if (token.startsWith(" ") || index === 0 || !/[\p{L}\p{N}]/u.test(token)) {
    element.textContent = token.trim() || token;
  } else {
    element.textContent = "\u00b7" + token;
  }
  element.title = JSON.stringify(token);
}

function selectedMatrix() {
  const layer = Number($("layer").value);
  const head = $("head").value;
  return head === "mean" ? current.mean_over_heads[layer] : current.weights[layer][Number(head)];
}

let pinned = null; // { row, light } of the clicked target token

function drawHeatmap() {
  pinned = null;
  const matrix = selectedMatrix();
  const grid = $("heatmap");
  const sources = current.source_tokens;
  grid.replaceChildren();
  grid.style.gridTemplateColumns = `auto repeat(${sources.length}, max-content)`;

  const header = document.createElement("div");
  header.className = "hm-row hm-header";
  header.setAttribute("role", "row");
  header.appendChild(Object.assign(document.createElement("div"), { className: "hm-corner" }));
  const sourceCells = sources.map((token, s) => {
    const cell = document.createElement("div");
    cell.className = "hm-src";
    cell.setAttribute("role", "columnheader");
    tokenLabel(cell, token, s);
    header.appendChild(cell);
    return cell;
  });
  grid.appendChild(header);

  current.target_tokens.forEach((token, t) => {
    const row = document.createElement("div");
    row.className = "hm-row hm-target";
    row.setAttribute("role", "row");
    const label = document.createElement("div");
    label.className = "hm-tgt";
    label.setAttribute("role", "rowheader");
    tokenLabel(label, token, t);
    row.appendChild(label);
    matrix[t].forEach((weight, s) => {
      const cell = document.createElement("div");
      cell.className = "hm-cell";
      cell.setAttribute("role", "cell");
      cell.style.setProperty("--w", Math.sqrt(weight).toFixed(3)); // sqrt: small weights stay visible
      cell.title = `${token.trim() || token} ← ${sources[s].trim() || sources[s]}: ${weight.toFixed(3)}`;
      row.appendChild(cell);
    });
    const rowMax = Math.max(...matrix[t]);
    const light = () => {
      grid.querySelectorAll(".hm-row.active").forEach((r) => r.classList.remove("active"));
      row.classList.add("active");
      matrix[t].forEach((weight, s) => {
        const share = weight / rowMax; // relative to the row's strongest source token, which gets full colour
        sourceCells[s].classList.add("lit");
        sourceCells[s].classList.toggle("strong", share > 0.6);
        sourceCells[s].style.setProperty("--lit", share.toFixed(3));
      });
    };
    const unlight = () => {
      row.classList.remove("active");
      sourceCells.forEach((c) => c.classList.remove("lit", "strong"));
      if (pinned) pinned.light(); // back to the row the user clicked
    };
    for (const part of row.children) {
      part.addEventListener("mouseenter", light);
      part.addEventListener("mouseleave", unlight);
    }
    // A click pins the row (touch screens have no hover); a second click unpins it.
    label.addEventListener("click", () => {
      const same = pinned && pinned.row === row;
      if (pinned) pinned.row.classList.remove("pinned", "active");
      sourceCells.forEach((c) => c.classList.remove("lit", "strong"));
      pinned = same ? null : { row, light };
      if (pinned) {
        row.classList.add("pinned");
        light();
      }
    });
    grid.appendChild(row);
  });
}

// The layers the answer has (CTranslate2 gives the last one only) and its heads (0: only their average).
function fillSelectors(layerNumbers, heads) {
  const layer = $("layer");
  const head = $("head");
  const last = layerNumbers.length - 1;
  layer.replaceChildren(...layerNumbers.map((number, i) =>
    new Option(`${number}${i === last ? " (last)" : ""}`, String(i))));
  layer.value = String(last);
  head.replaceChildren(new Option("average", "mean"),
    ...Array.from({ length: heads }, (_, i) => new Option(String(i + 1), String(i))));
  head.value = "mean";
}

// A hypothesis' Pharaoh pairs ("i-j": source word i, target word j) as the words they join.
function alignedWords(source, hypothesis) {
  const sourceWords = source.trim().split(/\s+/);
  const targetWords = hypothesis.text.split(/\s+/);
  const pairs = (hypothesis.alignment || "").split(" ").filter(Boolean).map((pair) => {
    const [i, j] = pair.split("-").map(Number);
    return `${sourceWords[i]} → ${targetWords[j]}`;
  });
  return pairs.length ? `Alignment: ${pairs.join(" · ")}` : "Alignment: no word pairs";
}

async function translate(event) {
  if (event) event.preventDefault();
  const text = $("source").value;
  const beam = Number($("beam").value);
  const wantNbest = $("nbest").checked && beam > 1;
  const wantAlignment = $("alignment").checked;
  const phrases = $("constraints").value.split("\n").map((phrase) => phrase.trim()).filter(Boolean);
  const constrained = phrases.length > 0;
  showError("");
  if (!text.trim()) {
    const name = languages ? languages.source_name : "";
    showError(`Type ${/^[AEIOU]/.test(name) ? "an" : "a"}${name ? " " + name : ""} sentence first.`);
    return;
  }
  const button = $("translate-button");
  button.disabled = true;
  button.textContent = "Translating…";
  try {
    // The translate call gives what the attention call cannot: n-best lists, alignments, constraints.
    const asked = { text, beam, nbest: wantNbest ? Math.min(beam, 4) : 1, alignments: wantAlignment,
                    ...(constrained ? { constraints: [phrases] } : {}) };
    const [attention, nbest] = await Promise.all([
      post("/v1/attention", { text, beam, attention_from: $("every-head").checked ? "torch" : "engine" }),
      wantNbest || wantAlignment || constrained ? post("/v1/translate", asked) : Promise.resolve(null),
    ]);
    current = attention;
    const shown = constrained ? nbest.translation : attention.translation;
    $("translation").textContent = shown || "(empty translation)";
    const pairs = $("alignment-pairs");
    pairs.textContent = wantAlignment ? alignedWords(text, nbest.translations[0].nbest[0]) : "";
    pairs.hidden = !wantAlignment;
    $("constraints-note").hidden = !constrained;
    const list = $("nbest-list");
    list.replaceChildren();
    if (wantNbest) {
      for (const h of nbest.translations[0].nbest) {
        const item = document.createElement("li");
        item.textContent = h.text || "(empty)";
        item.appendChild(Object.assign(document.createElement("span"), {
          className: "score", textContent: h.score.toFixed(3) }));
        list.appendChild(item);
      }
    }
    list.hidden = !wantNbest;
    $("timing").textContent = `${attention.time_ms.toFixed(0)} ms · beam ${beam} · ${attention.model}`;
    const layers = Array.from($("layer").options, (option) => option.textContent.split(" ")[0]).join();
    if (layers !== attention.layer_numbers.join() || $("head").options.length !== attention.heads + 1) {
      fillSelectors(attention.layer_numbers, attention.heads);
    }
    drawHeatmap();
    $("result").hidden = false;
    $("attention").hidden = constrained;
  } catch (error) {
    showError(error.message);
  } finally {
    button.disabled = false;
    button.textContent = "Translate";
  }
}

let languages = null;  // the pair /v1/model names: {source, target, name, source_name, target_name}

function showLanguages(pair) {
  if (!pair) return;
  const [sourceName, targetName] = pair.name.split(" → ");
  languages = {...pair, source_name: sourceName, target_name: targetName};
  document.title = `vaswani · ${pair.name}, with its attention`;
  $("pair").textContent = pair.name;
  $("source-label").textContent = sourceName;
  $("target-label").textContent = targetName;
  $("source").lang = pair.source.split("_")[0];
  if (pair.source !== "de") {  // the page's example sentences are German
    $("source").value = "";
    $("source").placeholder = "";
  }
  $("translation").lang = pair.target.split("_")[0];
  $("explain").textContent = `Each row is a ${targetName} subword as the decoder produced it; each column a ` +
    `${sourceName} subword. A cell is how much of that row's attention went to that source token (a row sums to ` +
    `1). Point at (or tap) a ${targetName} token to see which ${sourceName} tokens it looked at.`;
}

async function describeModel() {
  try {
    const info = await (await fetch("/v1/model")).json();
    showLanguages(info.languages);
    const c = info.config;
    const parts = [info.id, `${c.n_encoder_layers}+${c.n_decoder_layers} layers`, `d_model ${c.d_model}`,
      `${c.n_heads} heads`, [info.engine, info.quantization].filter(Boolean).join(" ")];
    if (info.step != null) parts.push(`step ${info.step}`);
    if (info.weights != null) parts.push(info.weights);
    if (info.val_bleu != null) parts.push(`val BLEU ${info.val_bleu.toFixed(1)}`);
    $("model").textContent = parts.join(" · ");
  } catch (e) {
    $("model").textContent = "";
  }
}

$("form").addEventListener("submit", translate);
$("source").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) translate(e);
});
$("layer").addEventListener("change", () => current && drawHeatmap());
$("head").addEventListener("change", () => current && drawHeatmap());
describeModel();
