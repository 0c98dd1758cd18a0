import ArgumentParser
import Foundation
import StoreBackup
#if canImport(Glibc)
import Glibc
#endif

/// Where the password of encrypted backups comes from. Never a command-line value, which
/// any user could read in the process list: a file, the environment, or a terminal prompt.
struct PasswordOption: ParsableArguments {
    @Option(name: .customLong("password-file"),
            help: ArgumentHelp("Read the backup password from the first line of this file (chmod 600); else STOREBACKUP_PASSWORD, else a prompt on a terminal.", valueName: "file"))
    var passwordFile: String?

    static let environmentVariable = "STOREBACKUP_PASSWORD"

    /// The password source, in order: --password-file, STOREBACKUP_PASSWORD (unless empty), a prompt when
    /// stdin is a terminal (asked twice when `confirm`). nil when there is none.
    /// A prompt is shown only when the password is first needed, and once per command.
    func provider(confirm: Bool) -> PasswordProvider? {
        if let passwordFile {
            let path = passwordFile
            return PasswordProvider { try Self.read(file: path) }
        }
        if let text = ProcessInfo.processInfo.environment[Self.environmentVariable], !text.isEmpty {
            return PasswordProvider { try BackupPassword(text) }
        }
        guard Terminal.standardInputIsTerminal else { return nil }
        let cache = PromptedPassword()
        return PasswordProvider { try cache.get(confirm: confirm) }
    }

    /// The first line of a file that only its owner can read.
    static func read(file path: String) throws -> BackupPassword {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw StoreBackupError.passwordUnavailable(reason: "cannot read password file \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & 0o077 == 0 else {
            throw StoreBackupError.passwordUnavailable(reason: "password file \(path) can be read by others; chmod 600 it")
        }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw StoreBackupError.passwordUnavailable(reason: "cannot read password file \(path)")
        }
        defer { try? handle.close() }
        let data = (try? handle.read(upToCount: 64 << 10)) ?? Data()
        var text = String(decoding: data, as: UTF8.self)
        if let newline = text.firstIndex(where: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }) { text = String(text[..<newline]) }
        return try BackupPassword(text)
    }
}

/// Asks on the terminal once and remembers the answer for the rest of the command.
private final class PromptedPassword: @unchecked Sendable {
    private let lock = NSLock()
    private var password: BackupPassword?

    func get(confirm: Bool) throws -> BackupPassword {
        try lock.withLock {
            if let password { return password }
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
            self.password = password
            return password
        }
    }
}
