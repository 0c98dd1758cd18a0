import ArgumentParser
import Foundation
import StoreBackup
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where the password of encrypted backups comes from. Never a command-line value, which
/// any user could read in the process list: a file, the environment, or a terminal prompt.
struct PasswordOption: ParsableArguments {
    @Option(
        name: .customLong("password-file"),
        help: ArgumentHelp(
            "Read the backup password from the first line of this file (chmod 600); else STOREBACKUP_PASSWORD, else a prompt on a terminal.",
            valueName: "file"))
    var passwordFile: String?

    static let environmentVariable = "STOREBACKUP_PASSWORD"

    /// The password source, in order: --password-file, STOREBACKUP_PASSWORD (unless empty), a prompt when
    /// stdin is a terminal (asked twice when `confirm`). nil when there is none.
    /// A prompt is shown only when the password is first needed, and once per command;
    /// `prompt` false never asks (for commands that can do without, like `prune`).
    func provider(confirm: Bool, prompt: Bool = true) -> PasswordProvider? {
        if let passwordFile {
            return .file(passwordFile)
        }
        if let text = ProcessInfo.processInfo.environment[Self.environmentVariable], !text.isEmpty {
            return PasswordProvider { try BackupPassword(text) }
        }
        guard prompt, Terminal.standardInputIsTerminal else { return nil }
        let cache = PromptedPassword()
        return PasswordProvider { try cache.get(confirm: confirm) }
    }
}

/// Asks on the terminal once and remembers the answer for the rest of the command.
private final class PromptedPassword: Sendable {
    private let remembered = Mutex<BackupPassword?>(nil)

    func get(confirm: Bool) throws -> BackupPassword {
        try remembered.withLock { remembered in
            if let password = remembered { return password }
            ProgressPrinter.shared.finishLine()
            guard let first = Terminal.readSecret(prompt: "Backup password: ") else {
                throw StoreBackupError.passwordUnavailable(reason: "no password entered")
            }
            if confirm {
                guard let second = Terminal.readSecret(prompt: "Repeat the password: "), second == first else {
                    throw StoreBackupError.passwordUnavailable(reason: "the two passwords differ")
                }
            }
            let password = try BackupPassword(first)
            remembered = password
            return password
        }
    }
}
