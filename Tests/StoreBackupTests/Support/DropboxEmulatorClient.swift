import Foundation
import XCTest

@testable import StoreBackup

/// The Dropbox API emulator (Tests/DropboxEmulator), started through testservers.py, and
/// its control routes (`/_emulator/...`: faults, token expiry, request log), spoken over
/// the same libcurl transport the destination uses, trusting the emulator's own CA.
final class DropboxEmulatorClient {
    let servers: TestServers
    let info: [String: Any]

    init(label: String, pageSize: Int? = nil) throws {
        servers = try TestServers(label: label)
        do {
            info = try servers.start("dropbox", arguments: pageSize.map { ["--page-size", "\($0)"] } ?? [])
        } catch {
            servers.stop()
            throw error
        }
    }

    func stop() { servers.stop() }

    var apiURL: String { info["api_url"] as! String }
    var contentURL: String { info["content_url"] as! String }
    var caFile: String { info["ca_file"] as! String }
    var appKey: String { info["app_key"] as! String }
    /// A short-lived token the emulator issued at start (no refresh token goes with it here).
    var accessToken: String { info["access_token"] as! String }

    /// Environment for a destination or a storebackup process: hosts, CA, and HOME (so
    /// no real credentials file is read); secrets only when given.
    func environment(home: String, token: String? = nil) -> [String: String] {
        var environment = [
            "HOME": home, "STOREBACKUP_DROPBOX_API_URL": apiURL, "STOREBACKUP_DROPBOX_CONTENT_URL": contentURL,
            "STOREBACKUP_CA_FILE": caFile, "STOREBACKUP_DROPBOX_AUTHORIZE_URL": apiURL + "/oauth2/authorize",
        ]
        environment["STOREBACKUP_DROPBOX_TOKEN"] = token
        return environment
    }

    private var transport: CurlTransfer { CurlTransfer(options: TransportOptions(caFile: caFile)) }

    /// A control route; returns its JSON answer.
    @discardableResult
    func control(_ route: String, _ body: [String: Any]? = nil, method: String = "POST") throws -> [String: Any] {
        var request = TransferRequest(method: method, url: apiURL + "/_emulator/" + route, label: "emulator")
        if let body {
            request.body = .bytes(try JSONSerialization.data(withJSONObject: body))
            request.headers.append(("Content-Type", "application/json"))
        }
        let response = try transport.perform(request, cancel: nil)
        XCTAssertEqual(response.status, 200, "emulator control \(route): \(response.bodyText)")
        return (try JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:]
    }

    /// Requests the emulator saw (route, status, fault, time, …), oldest first.
    func log() throws -> [[String: Any]] {
        try control("log", method: "GET")["requests"] as? [[String: Any]] ?? []
    }

    /// Every file and folder in the emulated Dropbox, by lower-cased path.
    func entries() throws -> [String: [String: Any]] {
        let all = try control("files", method: "GET")["entries"] as? [[String: Any]] ?? []
        return Dictionary(uniqueKeysWithValues: all.map { ($0["path_lower"] as! String, $0) })
    }

    /// A GET of an absolute URL on the emulator (the authorize link `auth dropbox` prints).
    func get(_ url: String) throws -> [String: Any] {
        let response = try transport.perform(TransferRequest(method: "GET", url: url, label: "emulator"), cancel: nil)
        XCTAssertEqual(response.status, 200, response.bodyText)
        return (try JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:]
    }

    /// Puts a file straight through the API (`/2/files/upload`, overwrite), for content
    /// storebackup would never upload itself (names that are not backups).
    func put(_ path: String, _ data: Data, token: String) throws {
        var request = TransferRequest(method: "POST", url: contentURL + "/2/files/upload", label: "emulator")
        request.credentials = .bearer(token: token)
        request.headers.append(("Dropbox-API-Arg", DropboxAPI.json(["path": path, "mode": "overwrite"])))
        request.headers.append(("Content-Type", "application/octet-stream"))
        request.body = .bytes(data)
        let response = try transport.perform(request, cancel: nil)
        XCTAssertEqual(response.status, 200, response.bodyText)
    }

    /// A fresh access token with its refresh token, as the OAuth flow would give.
    func issueToken() throws -> (access: String, refresh: String) {
        let answer = try control("issue_token")
        return (answer["access_token"] as! String, answer["refresh_token"] as! String)
    }
}
