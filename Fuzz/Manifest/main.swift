// A model set's manifest.json (outside bytes: a model folder anyone may hand the element): decoded,
// then checked against an empty set folder (every listed file must resolve inside it) and every
// port's shape made concrete at a few sizes.
import Foundation
import FuzzSupport
@testable import MatteEngine

let folder = FileManager.default.currentDirectoryPath + "/manifest-set-\(getpid())"
try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
fuzzMain { data in
    guard let manifest = try? JSONDecoder().decode(ModelManifest.self, from: Data(data)) else { return }
    _ = try? manifest.validate(directory: folder, engine: manifest.engine, required: Array(manifest.models.keys))
    for model in manifest.models.values {
        for port in model.inputs + model.outputs {
            for (height, width) in [(288, 512), (0, 0), (1, Int.max / 2)] { _ = try? port.concreteShape(height: height, width: width) }
        }
    }
}
