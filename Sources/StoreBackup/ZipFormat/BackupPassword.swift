import Foundation

/// The password of an encrypted backup. Its text never appears in descriptions, so
/// printing or logging one by mistake shows `<password>` instead.
public struct BackupPassword: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The UTF-8 bytes, as WinZip AES and libzip use them.
    let bytes: [UInt8]

    /// A password from text. Fails for an empty password or one holding a NUL byte
    /// (libzip takes passwords as C strings).
    public init(_ text: String) throws {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw StoreBackupError.passwordUnavailable(reason: "the password is empty") }
        guard !bytes.contains(0) else { throw StoreBackupError.passwordUnavailable(reason: "the password contains a NUL character") }
        self.bytes = bytes
    }

    /// The first line of a file that only its owner can read (chmod 600); a file others can
    /// read is refused, since anyone who can read it can open the backups.
    public init(contentsOfFile path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw StoreBackupError.passwordUnavailable(reason: "cannot read password file \(path): \(String(cString: strerror(errno)))")
        }
        // A folder, device or pipe gives confusing errors further on (an empty password, or
        // a hang on a FIFO); say plainly what is expected.
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw StoreBackupError.passwordUnavailable(reason: "password file \(path) is not a regular file")
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
        try self.init(text)
    }

    /// The password hidden, for logs: always `<password>`.
    public var description: String { "<password>" }
    /// The password hidden from `debugPrint` and the debugger too: always `<password>`.
    public var debugDescription: String { "<password>" }

    /// Calls `body` with the password as a NUL-terminated C string (for libzip).
    func withCString<T>(_ body: (UnsafePointer<CChar>) throws -> T) rethrows -> T {
        try (bytes.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { try body($0.baseAddress!) }
    }
}

/// Where the password of an encrypted backup comes from. Reading asks for it only when
/// it meets an encrypted backup, so a command line can prompt just then.
public struct PasswordProvider: Sendable {
    private let get: @Sendable () throws -> BackupPassword

    /// Asks `get` each time a password is needed (e.g. a terminal prompt); it may throw
    /// `passwordUnavailable` when there is none.
    public init(_ get: @escaping @Sendable () throws -> BackupPassword) {
        self.get = get
    }

    /// The first line of a file only its owner can read (refused when group or others can),
    /// read each time a password is needed.
    public static func file(_ path: String) -> PasswordProvider {
        PasswordProvider { try BackupPassword(contentsOfFile: path) }
    }

    /// Always this password.
    public static func fixed(_ password: BackupPassword) -> PasswordProvider {
        PasswordProvider { password }
    }

    /// The password, fetched anew at each call (``file(_:)`` reads the file again);
    /// throws `passwordUnavailable` when there is none.
    public func password() throws -> BackupPassword { try get() }
}
