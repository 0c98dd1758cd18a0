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

    public var description: String { "<password>" }
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

    /// Always this password.
    public static func fixed(_ password: BackupPassword) -> PasswordProvider {
        PasswordProvider { password }
    }

    public func password() throws -> BackupPassword { try get() }
}
