/**
 * The entry point of `ward proxy` on its own. The sidecar runs once per pod, so it loads only
 * what it needs: this command and the proxy, not the manifest pipeline, the index or the
 * controller that the rest of the CLI uses (bin/ward.js routes `ward proxy …` here).
 */
import { Command, CommanderError } from '@commander-js/extra-typings';
import pc from 'picocolors';
import { registerProxyCommand } from './commands/proxy.js';
import { type CliIo, EXIT, processIo, UsageError } from './io.js';
import { palette } from './output.js';

/** Runs `ward proxy` with `argv` (starting with `proxy`); resolves with the exit status. */
export async function proxyMain(argv: readonly string[], io: CliIo = processIo(pc.isColorSupported), signal?: AbortSignal): Promise<number> {
  const result = { status: EXIT.ok as number };
  const prog = new Command('ward')
    .showHelpAfterError()
    .configureOutput({ writeOut: (s) => io.out(s), writeErr: (s) => io.err(s) })
    .exitOverride();
  registerProxyCommand(prog as unknown as Parameters<typeof registerProxyCommand>[0], io, result, signal);
  try {
    await prog.parseAsync([...argv], { from: 'user' });
    return result.status;
  } catch (e) {
    if (e instanceof CommanderError) return e.code === 'commander.helpDisplayed' || e.code === 'commander.help' ? EXIT.ok : EXIT.usage;
    if (e instanceof UsageError) {
      io.err(`${palette(io.color).red('error')}: ${e.message}\n`);
      return EXIT.usage;
    }
    throw e;
  }
}
