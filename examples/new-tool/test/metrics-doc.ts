/** Reads docs/ pages and checks metric names against docs/metrics.md (shared by the tests here). */
import { readFileSync } from "node:fs";

export const docs = (name: string) => readFileSync(new URL(`../../../docs/${name}`, import.meta.url), "utf8");

/**
 * The metric names listed in docs/metrics.md; `<data_source>` or `<tool_name>` matches any one path
 * segment, `<var>` acc or reward, `<n>` a number.
 */
export function documentedMetrics(): RegExp[] {
  const names = [...docs("metrics.md").matchAll(/^\|\s*`([^`]+)`\s*\|/gm)].map((m) => m[1]!);
  return names.map(
    (n) =>
      new RegExp(
        `^${n
          .replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
          .replace(/<(data_source|tool_name)>/g, "[^/]+")
          .replace(/<var>/g, "(acc|reward)")
          .replace(/<n>/g, "[0-9]+")}$`,
      ),
  );
}

export function undocumented(names: Iterable<string>): string[] {
  const known = documentedMetrics();
  return [...names].filter((n) => !known.some((re) => re.test(n)));
}
