import Foundation
import Hummingbird

/// The app's own API: plain-text values under keys.
///
/// - `GET /items`: every item as JSON
/// - `GET /items/{key}`: the value, or 404
/// - `PUT /items/{key}`: the request body becomes the value
/// - `DELETE /items/{key}`
///
/// While a restore swaps the store these answer 503 with `Retry-After: 1`.
struct ItemRoutes {
    let store: ItemStore

    struct ItemList: ResponseEncodable {
        var items: [String: String]
    }

    func register(on router: Router<BasicRequestContext>) {
        let items = router.group("items").add(middleware: StoreUnavailableMiddleware())
        items.get { _, _ in ItemList(items: try await store.all()) }
        items.get(":key") { _, context -> String in
            let key = try context.parameters.require("key")
            guard let value = try await store.get(key) else { throw HTTPError(.notFound, message: "no item \(key)\n") }
            return value
        }
        items.put(":key") { request, context -> HTTPResponse.Status in
            let key = try context.parameters.require("key")
            var request = request
            let body = try await request.collectBody(upTo: 1 << 20)
            try await store.put(key, String(buffer: body))
            return .noContent
        }
        items.delete(":key") { _, context -> HTTPResponse.Status in
            let key = try context.parameters.require("key")
            return try await store.delete(key) ? .noContent : .notFound
        }
    }
}

/// Turns "the store is being swapped" into 503 Service Unavailable with Retry-After,
/// so clients know to come back instead of seeing an error.
struct StoreUnavailableMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as ItemStore.Unavailable {
            throw HTTPError(.serviceUnavailable, headers: [.retryAfter: "1"], message: error.description + "\n")
        }
    }
}
