// The IAM evaluator's Node sidecar (retrain/embedded/iam/evaluator.py starts it).
//
// Protocol, one JSON object per line: on start it writes {"ready": true}, or {"fatal": "<message>"} and
// exits if @cloud-copilot/iam-simulate cannot be loaded (run `npm ci`). Then, for each request line
// {"id": <int>, "simulation": <iam-simulate Simulation>, "options": <SimulationOptions, optional>} read
// from stdin, in order, it writes
// {"id": ..., "result": <runSimulation's result>} or {"id": ..., "error": "<message>"}. It exits when
// stdin closes.
import { createInterface } from 'node:readline'

function send(message) {
  return new Promise((resolve) => process.stdout.write(JSON.stringify(message) + '\n', resolve))
}

let runSimulation
try {
  ;({ runSimulation } = await import('@cloud-copilot/iam-simulate'))
} catch (err) {
  await send({ fatal: `cannot load @cloud-copilot/iam-simulate: ${err.message}` })
  process.exit(1)
}
await send({ ready: true })

// `for await` takes the next line only after this one's answer is written: no interleaving.
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (!line.trim()) continue
  let id = null
  try {
    const request = JSON.parse(line)
    id = request.id ?? null
    await send({ id, result: await runSimulation(request.simulation, request.options ?? {}) })
  } catch (err) {
    await send({ id, error: err instanceof Error ? err.message : String(err) })
  }
}
