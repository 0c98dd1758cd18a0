import Foundation
import XCTest

@testable import StoreBackup

/// One backend the destination contract runs against: a local folder, or a real server on
/// loopback reached directly or through the fault proxy (Tests/Servers/faultproxy.py).
/// Destinations are made by `DestinationResolver`, as the command line makes them.
struct ContractBackend {
    let label: String
    /// The server's port, the proxy's upstream; nil for the local folder (no network).
    let port: Int?
    /// Whether the proxy must relay raw bytes (SSH, TLS) instead of HTTP requests.
    let tcpProxy: Bool
    /// The destination for `folder`, through the proxy on `proxyPort` when given.
    let make: (_ folder: String, _ proxyPort: Int?, _ retry: RetryPolicy) throws -> any BackupDestination
    /// Puts an object storebackup would never upload (its name is not a backup's) at
    /// `path` (relative to `folder`; may name a subfolder).
    let putForeign: (_ folder: String, _ path: String) throws -> Void
    /// Where the server keeps `folder`'s files, when they are visible from here and a failed
    /// upload can leave a temporary there (not S3, not Dropbox).
    let localFolder: ((_ folder: String) -> String)?
    /// What the server holds for `folder`, read on its side (see `ServerContents`).
    let contents: (_ folder: String) throws -> ServerContents
    /// The command line's destination arguments for `folder` after `flag` (`--to`, `--from`),
    /// through the proxy on `proxyPort` when given.
    let arguments: (_ folder: String, _ flag: String, _ proxyPort: Int?) throws -> [String]
    /// The environment the command line needs (credentials, HOME).
    var environment: [String: String] = [:]
    /// Secret values of this backend, which must never appear in an argv, output or log.
    var secrets: [String] = []

    /// The backends, their servers started under `servers`; `work` holds local state.
    static func all(servers: TestServers, dropbox: DropboxEmulatorClient, work: String) throws -> [ContractBackend] {
        [
            local(work: work), try s3(servers.start("s3"), work: work), try s3(servers.start("moto"), work: work),
            try webDAV(servers.start("webdav"), work: work), try sftp(servers.start("sftp"), work: work),
            dropboxBackend(dropbox, work: work),
        ]
    }

    static func local(work: String) -> ContractBackend {
        let root = work + "/local"
        return ContractBackend(
            label: "local", port: nil, tcpProxy: false,
            make: { folder, _, _ in try DestinationResolver.resolve(root + "/" + folder) },
            putForeign: { folder, path in try writeFile(root + "/" + folder + "/" + path) },
            localFolder: { root + "/" + $0 },
            contents: { ServerContents(stored: try ServerContents.files(under: root + "/" + $0)) },
            arguments: { folder, flag, _ in [flag, root + "/" + folder] })
    }

    static func s3(_ server: [String: Any], work: String) -> ContractBackend {
        let port = server["port"] as! Int
        let raw = S3RawRequest(server: server)
        // rclone keeps the bucket in a plain folder; moto keeps it in memory, so its view is
        // its own ListObjectsV2 and GET, made by curl.
        let backing = (server["data_dir"] as? String).map { $0 + "/" + raw.bucket }
        func contents(_ folder: String) throws -> ServerContents {
            var view = ServerContents(unfinished: Set(try raw.multipartUploads(prefix: folder + "/")))
            if let backing {
                view.stored = try ServerContents.files(under: backing + "/" + folder)
            } else {
                for key in try raw.objectKeys(prefix: folder + "/") {
                    view.stored[String(key.dropFirst(folder.count + 1))] = ServerContents.sha256(try raw.get(key))
                }
            }
            return view
        }
        let environment = [
            "AWS_ACCESS_KEY_ID": raw.accessKey, "AWS_SECRET_ACCESS_KEY": raw.secretKey,
            "AWS_REGION": "us-east-1", "HOME": work,
        ]
        return ContractBackend(
            label: server["kind"] as! String == "s3" ? "s3-rclone" : "s3-moto", port: port, tcpProxy: false,
            make: { folder, proxy, retry in
                try DestinationResolver.resolve(
                    "s3://\(raw.bucket)/\(folder)",
                    options: DestinationOptions(
                        retry: retry, s3Endpoint: "http://127.0.0.1:\(proxy ?? port)", environment: environment))
            },
            putForeign: { folder, path in try raw.put(folder + "/" + path, Data("not a backup".utf8)) },
            localFolder: nil,  // S3 has no temporaries; unfinished multipart uploads are checked apart
            contents: contents,
            arguments: { folder, flag, proxy in
                [flag, "s3://\(raw.bucket)/\(folder)", "--s3-endpoint", "http://127.0.0.1:\(proxy ?? port)"]
            },
            environment: environment, secrets: [raw.secretKey])
    }

    static func webDAV(_ server: [String: Any], work: String) -> ContractBackend {
        let port = server["port"] as! Int
        let data = server["data_dir"] as! String
        let environment = [
            "STOREBACKUP_WEBDAV_USER": server["user"] as! String,
            "STOREBACKUP_WEBDAV_PASSWORD": server["password"] as! String, "HOME": work,
        ]
        return ContractBackend(
            label: "webdav", port: port, tcpProxy: false,
            make: { folder, proxy, retry in
                try DestinationResolver.resolve(
                    "webdav://127.0.0.1:\(proxy ?? port)/dav/\(folder)",
                    options: DestinationOptions(retry: retry, environment: environment))
            },
            putForeign: { folder, path in try writeFile(data + "/" + folder + "/" + path) },
            localFolder: { data + "/" + $0 },
            contents: { ServerContents(stored: try ServerContents.files(under: data + "/" + $0)) },
            arguments: { folder, flag, proxy in [flag, "webdav://127.0.0.1:\(proxy ?? port)/dav/\(folder)"] },
            environment: environment, secrets: [server["password"] as! String])
    }

    static func sftp(_ server: [String: Any], work: String) throws -> ContractBackend {
        let port = server["port"] as! Int
        let data = server["path"] as! String
        let user = server["user"] as! String
        let key = server["key"] as! String
        // The host key is the server's, whatever port (the proxy's) it is reached on.
        let hostKey = try String(contentsOfFile: server["known_hosts"] as! String, encoding: .utf8)
            .split(separator: " ").dropFirst().joined(separator: " ")
        func knownHostsFile(_ port: Int) throws -> String {
            let path = work + "/known_hosts-\(port)"
            try "[127.0.0.1]:\(port) \(hostKey)".write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }
        return ContractBackend(
            label: "sftp", port: port, tcpProxy: true,
            make: { folder, proxy, retry in
                let knownHosts = try knownHostsFile(proxy ?? port)
                return try DestinationResolver.resolve(
                    "sftp://\(user)@127.0.0.1:\(proxy ?? port)\(data)/\(folder)",
                    options: DestinationOptions(retry: retry, sshKey: key, knownHosts: knownHosts, environment: ["HOME": work]))
            },
            putForeign: { folder, path in try writeFile(data + "/" + folder + "/" + path) },
            localFolder: { data + "/" + $0 },
            contents: { ServerContents(stored: try ServerContents.files(under: data + "/" + $0)) },
            arguments: { folder, flag, proxy in
                [
                    flag, "sftp://\(user)@127.0.0.1:\(proxy ?? port)\(data)/\(folder)", "--ssh-key", key, "--known-hosts",
                    try knownHostsFile(proxy ?? port),
                ]
            },
            environment: ["HOME": work],
            // The private key's base64 body: a line of it in an argv would be a leak.
            secrets: try String(contentsOfFile: key, encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(
                String.init))
    }

    static func dropboxBackend(_ emulator: DropboxEmulatorClient, work: String) -> ContractBackend {
        let port = URL(string: emulator.apiURL)!.port!
        return ContractBackend(
            label: "dropbox", port: port, tcpProxy: true,
            make: { folder, proxy, retry in
                var environment = emulator.environment(home: work, token: emulator.accessToken)
                if let proxy {
                    // One port serves both hosts: TLS goes through the proxy untouched.
                    environment["STOREBACKUP_DROPBOX_API_URL"] = emulator.apiURL.replacingOccurrences(of: ":\(port)", with: ":\(proxy)")
                    environment["STOREBACKUP_DROPBOX_CONTENT_URL"] = emulator.contentURL.replacingOccurrences(
                        of: ":\(port)", with: ":\(proxy)")
                }
                return try DestinationResolver.resolve(
                    "dropbox:///\(folder)", options: DestinationOptions(retry: retry, environment: environment))
            },
            putForeign: { folder, path in try emulator.put("/\(folder)/\(path)", Data("not a backup".utf8), token: emulator.accessToken) },
            localFolder: nil,  // an upload session is no file
            contents: { folder in
                let state = try emulator.control("files?sha256=1", method: "GET")
                let prefix = "/" + folder.lowercased() + "/"
                var view = ServerContents(unfinished: Set((state["upload_sessions"] as? [String: Any] ?? [:]).keys))
                for entry in state["entries"] as? [[String: Any]] ?? [] where entry[".tag"] as? String == "file" {
                    guard let lower = entry["path_lower"] as? String, lower.hasPrefix(prefix),
                        let display = entry["path_display"] as? String, let sha = entry["sha256"] as? String
                    else { continue }
                    view.stored[String(display.dropFirst(prefix.count))] = sha
                }
                return view
            },
            arguments: { folder, flag, _ in [flag, "dropbox:///\(folder)"] },
            environment: emulator.environment(home: work, token: emulator.accessToken), secrets: [emulator.accessToken])
    }

    private static func writeFile(_ path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o777])
        try Data("not a backup".utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o666)
    }

    /// Checks, on the server's side, that `folder` holds exactly `expected` (relative path
    /// to SHA-256) and that no upload started since `before` was left unfinished.
    func assertHolds(
        _ expected: [String: String], in folder: String, unfinishedBefore before: Set<String> = [],
        _ message: String, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let now = try contents(folder)
        XCTAssertEqual(now.stored, expected, "[\(label)] \(message): what the server holds", file: file, line: line)
        XCTAssertEqual(now.unfinished.subtracting(before), [], "[\(label)] \(message): unfinished uploads left", file: file, line: line)
    }
}

/// The fault proxy in front of one backend's server, started with a plan; its log is read
/// from its log file (one JSON object per request, or per connection in TCP mode).
struct ContractProxy {
    let port: Int
    let logFile: String

    /// A proxy already started, by its port and log file.
    init(port: Int, logFile: String) {
        self.port = port
        self.logFile = logFile
    }

    init(servers: TestServers, backend: ContractBackend, rules: [[String: Any]], work: String) throws {
        let plan = work + "/plan-\(UUID().uuidString.prefix(8)).json"
        try JSONSerialization.data(withJSONObject: ["seed": 1, "rules": rules]).write(to: URL(fileURLWithPath: plan))
        let info = try servers.start(
            "proxy",
            arguments: ["--upstream", "127.0.0.1:\(backend.port!)", "--plan", plan]
                + (backend.tcpProxy ? ["--tcp"] : []))
        port = info["port"] as! Int
        logFile = info["log"] as! String
    }

    /// The log entries written so far.
    func entries() -> [[String: Any]] {
        let text = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// The entries once `enough` holds for them. The proxy logs a request (a connection in
    /// TCP mode) when it has relayed it to the end, which can be just after the client is
    /// done: poll the log for that event, up to 20 s.
    func entries(until enough: ([[String: Any]]) -> Bool) -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(20)
        var current = entries()
        while !enough(current) && Date() < deadline {
            usleep(20_000)
            current = entries()
        }
        return current
    }

    /// Entries where a fault struck.
    static func faults(_ entries: [[String: Any]]) -> [String] { entries.compactMap { $0["fault"] as? String } }
}
