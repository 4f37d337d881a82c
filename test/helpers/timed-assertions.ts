// Finds assertions that compare elapsed wall-clock time against a bound. The suite runs on shared
// machines (CI beside other jobs, a user's laptop beside a training run): a bound that holds on a
// quiet machine fails on a busy one, so real-scale timing belongs in bench/, never in a test's
// assertion (issue 51). test/timing-rule.test.ts runs this over every test file.
//
// The rule, read from the TypeScript syntax tree of one file:
// - a clock is a call of Date.now, performance.now, process.hrtime (and .bigint), process.uptime;
// - a value is timed when its expression holds a clock, a timed name, or a call of a timed
//   function (one that returns a timed value); names and object fields assigned a timed value, and
//   arrays pushed one, become timed; so do names that say they hold a run's time (`took`, `elapsed`,
//   `runSeconds(...)`), since a time parsed from a child's output is still wall-clock;
// - an assertion (assert(...), assert.ok/equal/..., t.assert...) is timed when an argument holds a
//   comparison (<, <=, >, >=) with a timed side.
// A deadline in a polling loop (`while (Date.now() < until)`) is no assertion and passes. A line
// may be waived by a comment `timing-rule: <why this is not wall-clock>` on it or just above.
import ts from "typescript";

export interface TimedAssertion {
  line: number;
  text: string;
}

const CLOCKS = new Set(["Date.now", "performance.now", "process.hrtime", "process.hrtime.bigint", "process.uptime"]);
/** Names that hold a run's wall-clock time by what they say, wherever the value came from. */
const TIME_NAME = /^(took|elapsed\w*|wall\w*|duration\w*|runSeconds|realSeconds|\w*ElapsedMs|\w*Took)$/;
const RELATIONAL = new Set([
  ts.SyntaxKind.LessThanToken,
  ts.SyntaxKind.LessThanEqualsToken,
  ts.SyntaxKind.GreaterThanToken,
  ts.SyntaxKind.GreaterThanEqualsToken,
]);

/** Finds the timed assertions of one file's source text. */
export function findTimedAssertions(source: string, fileName = "test.ts"): TimedAssertion[] {
  const sf = ts.createSourceFile(fileName, source, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const timedNames = new Set<string>();
  const timedFields = new Set<string>();
  const timedFunctions = new Set<string>();

  const calleeName = (e: ts.Expression): string => e.getText(sf).replace(/\s+/g, "");
  /** Whether an expression holds a clock or a timed value. */
  const timed = (node: ts.Node): boolean => {
    let found = false;
    const visit = (n: ts.Node): void => {
      if (found) return;
      if (ts.isCallExpression(n)) {
        const callee = calleeName(n.expression);
        if (CLOCKS.has(callee) || timedFunctions.has(callee) || TIME_NAME.test(callee)) {
          found = true;
          return;
        }
      }
      if (ts.isIdentifier(n) && (timedNames.has(n.text) || TIME_NAME.test(n.text))) {
        // A field name in `o.took` or `{ took: ... }` is no variable: fields are judged below.
        const p = n.parent;
        const isField =
          (ts.isPropertyAccessExpression(p) && p.name === n) || (ts.isPropertyAssignment(p) && p.name === n);
        if (!isField) {
          found = true;
          return;
        }
      }
      if (ts.isPropertyAccessExpression(n) && timedFields.has(n.name.text)) {
        found = true;
        return;
      }
      // A function written inline is not called here: its body says nothing about this value.
      if (ts.isArrowFunction(n) || ts.isFunctionExpression(n)) return;
      ts.forEachChild(n, visit);
    };
    visit(node);
    return found;
  };
  /** Whether a function body returns a timed value. */
  const returnsTimed = (body: ts.Node): boolean => {
    if (!ts.isBlock(body)) return timed(body);
    let found = false;
    const visit = (n: ts.Node): void => {
      if (found) return;
      if (ts.isReturnStatement(n) && n.expression && timed(n.expression)) found = true;
      else if (!ts.isFunctionLike(n)) ts.forEachChild(n, visit);
    };
    visit(body);
    return found;
  };

  // Taint to a fixed point: each pass may mark names that make later ones timed.
  for (let changed = true; changed; ) {
    changed = false;
    const mark = (set: Set<string>, name: string) => {
      if (!set.has(name)) {
        set.add(name);
        changed = true;
      }
    };
    const visit = (n: ts.Node): void => {
      if (ts.isVariableDeclaration(n) && n.initializer) {
        const init = n.initializer;
        if ((ts.isArrowFunction(init) || ts.isFunctionExpression(init)) && ts.isIdentifier(n.name)) {
          if (returnsTimed(init.body)) mark(timedFunctions, n.name.text);
        } else if (timed(init)) {
          if (ts.isIdentifier(n.name)) mark(timedNames, n.name.text);
          else for (const el of n.name.elements) if (!ts.isOmittedExpression(el)) mark(timedNames, el.name.getText(sf));
        }
      }
      if (ts.isFunctionDeclaration(n) && n.name && n.body && returnsTimed(n.body)) mark(timedFunctions, n.name.text);
      if (ts.isBinaryExpression(n) && n.operatorToken.kind === ts.SyntaxKind.EqualsToken && timed(n.right)) {
        if (ts.isIdentifier(n.left)) mark(timedNames, n.left.text);
        else if (ts.isPropertyAccessExpression(n.left)) mark(timedFields, n.left.name.text);
      }
      if (ts.isPropertyAssignment(n) && timed(n.initializer)) mark(timedFields, n.name.getText(sf));
      // clock.push(performance.now()): the array holds times.
      if (
        ts.isCallExpression(n) &&
        ts.isPropertyAccessExpression(n.expression) &&
        n.expression.name.text === "push" &&
        ts.isIdentifier(n.expression.expression) &&
        n.arguments.some(timed)
      )
        mark(timedNames, n.expression.expression.text);
      ts.forEachChild(n, visit);
    };
    visit(sf);
  }

  const lines = source.split("\n");
  const waived = (line: number) =>
    [lines[line - 1], lines[line - 2]].some((l) => l !== undefined && /timing-rule:\s*\S/.test(l));
  const isAssertion = (callee: string) => /^(\w+\.)?assert(\.\w+)?$/.test(callee);
  const comparesTime = (arg: ts.Node): boolean => {
    let found = false;
    const visit = (n: ts.Node): void => {
      if (found) return;
      if (ts.isBinaryExpression(n) && RELATIONAL.has(n.operatorToken.kind) && (timed(n.left) || timed(n.right)))
        found = true;
      else ts.forEachChild(n, visit);
    };
    visit(arg);
    return found;
  };
  const out: TimedAssertion[] = [];
  const visit = (n: ts.Node): void => {
    if (ts.isCallExpression(n) && isAssertion(calleeName(n.expression)) && n.arguments.some(comparesTime)) {
      const line = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
      if (!waived(line)) out.push({ line, text: n.getText(sf).split("\n")[0] as string });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}
