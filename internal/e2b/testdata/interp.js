// Drives the official @e2b/code-interpreter SDK (the module named by
// argv[2]) against airlock's E2B API, unchanged: Sandbox.create() asks for
// the code-interpreter-v1 template, runCode talks to the code interpreter
// on port 49999 through the data plane (E2B_SANDBOX_URL with the
// E2b-Sandbox-Port header, as the SDK sends it). Prints one JSON object on
// its last line.
'use strict'
const { Sandbox } = require(process.argv[2])

// stage names the SDK call under way; failedAt the first that failed,
// for a failure's message.
let stage = 'Sandbox.create'
let failedAt

// track wraps sbx so that each method call sets stage.
function track(sbx) {
  return new Proxy(sbx, {
    get(t, k) {
      const v = t[k]
      if (typeof v !== 'function') return v
      return (...args) => {
        const name = `${String(k)}(${JSON.stringify(args[0]) ?? ''})`.slice(0, 120)
        stage = name
        return Promise.resolve(v.apply(t, args)).catch((e) => {
          failedAt ??= name
          throw e
        })
      }
    },
  })
}

async function main() {
  const out = {}
  const sbx = track(await Sandbox.create({ envs: { AIRLOCK_CREATE_ENV: 'from create' } }))
  out.id = sbx.sandboxId
  try {
    out.createEnv = (await sbx.runCode('import os; os.environ.get("AIRLOCK_CREATE_ENV", "unset")')).text
    out.callEnv = (await sbx.runCode('os.environ.get("AIRLOCK_CALL_ENV", "unset")', { envs: { AIRLOCK_CALL_ENV: 'for one call' } })).text
    out.callEnvAfter = (await sbx.runCode('os.environ.get("AIRLOCK_CALL_ENV", "unset")')).text
    await sbx.runCode('x = 1')
    out.text = (await sbx.runCode('x+1')).text

    const stdout = [], stderr = []
    const logs = await sbx.runCode('import sys\nprint("out")\nprint("err", file=sys.stderr)', {
      onStdout: (m) => stdout.push(m.line), onStderr: (m) => stderr.push(m.line),
    })
    out.stdout = stdout
    out.stderr = stderr
    out.logs = logs.logs

    const formats = []
    const chart = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()', {
      onResult: (r) => formats.push(r.formats()),
    })
    out.png = chart.results.some((r) => r.png && Buffer.from(r.png, 'base64').subarray(0, 4).toString('latin1') === '\x89PNG')
    out.onResult = formats

    // Each of the display formats the wire carries, as the SDK's Result
    // exposes them: html, markdown, svg, json, latex, and the text.
    const shown = await sbx.runCode([
      'from IPython.display import display, HTML, Markdown, SVG, JSON, Latex',
      'display(HTML("<b>bold</b>"))',
      'display(Markdown("**md**"))',
      'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>\'))',
      'display(JSON({"a": 1}))',
      'display(Latex("$x^2$"))',
      '"last"',
    ].join('\n'))
    out.displayed = shown.results.map((r) => ({ formats: r.formats(), main: r.isMainResult, html: r.html, markdown: r.markdown, svg: r.svg && r.svg.includes('<svg'), json: r.json, latex: r.latex, text: r.text }))

    const failed = await sbx.runCode('raise ValueError("bad value")')
    out.error = failed.error && { name: failed.error.name, value: failed.error.value, traceback: failed.error.traceback.includes('ValueError') }

    try {
      await sbx.runCode('import time\ntime.sleep(600)', { timeoutMs: 3000 })
      out.timeout = 'none'
    } catch (e) {
      out.timeout = e.name
      failedAt = undefined // expected
    }
    out.afterTimeout = (await sbx.runCode('x * 10')).text

    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    out.ctx = { language: ctx.language, cwd: ctx.cwd }
    out.ctxCwd = (await sbx.runCode('import os; os.getcwd()', { context: ctx })).text
    out.listed = (await sbx.listCodeContexts()).some((c) => c.id === ctx.id)
    await sbx.runCode('y = 5', { context: ctx })
    out.ctxY = (await sbx.runCode('y', { context: ctx })).text
    await sbx.restartCodeContext(ctx)
    const after = await sbx.runCode('y', { context: ctx })
    out.afterRestart = after.error && after.error.name
    await sbx.removeCodeContext(ctx)
    out.listedAfterRemove = (await sbx.listCodeContexts()).some((c) => c.id === ctx.id)

    // bash: airlock's own context, one shell whose state persists.
    const bashOut = []
    await sbx.runCode('b=41; cd /tmp', { language: 'bash' })
    const bash = await sbx.runCode('echo $((b+1)) $PWD', { language: 'bash', onStdout: (m) => bashOut.push(m.line) })
    out.bash = { stdout: bashOut, logs: bash.logs.stdout }
    const bashFail = await sbx.runCode('ls /nonexistent', { language: 'bash' })
    out.bashError = bashFail.error && { name: bashFail.error.name, value: bashFail.error.value, stderr: bashFail.logs.stderr.join('') }

    // JavaScript (node): state, console, the last expression's value.
    await sbx.runCode('let j = 20', { language: 'js' })
    const js = await sbx.runCode('console.log("from js"); j + 1', { language: 'js' })
    out.js = { text: js.text, stdout: js.logs.stdout }
    const jsFail = await sbx.runCode('null.x', { language: 'javascript' })
    out.jsError = jsFail.error && jsFail.error.name

    // TypeScript in a context of its own.
    const tsCtx = await sbx.createCodeContext({ language: 'ts' })
    out.tsCtx = tsCtx.language
    await sbx.runCode('const t: number = 6', { context: tsCtx })
    out.ts = (await sbx.runCode('t * 7', { context: tsCtx })).text
    await sbx.removeCodeContext(tsCtx)

    try {
      await sbx.runCode('1', { language: 'r' })
      out.r = 'ran'
    } catch (e) {
      out.r = `${e.name}: ${e.message}`
      failedAt = undefined // expected
    }
  } finally {
    await sbx.kill()
  }
  console.log(JSON.stringify(out))
}

main().catch((e) => {
  console.error(`failed at ${failedAt ?? stage}:`, e)
  process.exit(1)
})
