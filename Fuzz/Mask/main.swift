// A decoded seed mask's plane (any size, stride, offset and mapped length a decoder could hand over),
// packed, then taken as MatAnyone2 takes a mask: resampled to a working size, its seed prepared, its
// grey levels read as people.
import FuzzSupport
@testable import MatteEngine

fuzzMain { data in
    var reader = FuzzReader(data)
    let width = reader.uint16() % 300, height = reader.uint16() % 300
    let stride = width + Int(reader.byte()) - 16
    let offset = Int(reader.byte()) - 8
    let workingWidth = 1 + Int(reader.byte()) % 64, workingHeight = 1 + Int(reader.byte()) % 64
    let plane = reader.rest()
    guard let pixels = try? MaskPixels.pack(plane, offset: offset, width: width, height: height, stride: stride) else { return }
    precondition(pixels.count == width * height)
    let mask = MatAnyone2Engine.resample(pixels, width: width, height: height, toWidth: workingWidth, toHeight: workingHeight)
    precondition(mask.count == workingWidth * workingHeight)
    let seed = SeedMask.prepare(mask, width: workingWidth, height: workingHeight, dilate: 2, erode: 2)
    precondition(seed.count == mask.count && seed.allSatisfy { $0 >= 0 && $0 <= 1 })
    _ = PersonMasks.labels(in: pixels, minimumArea: max(1, pixels.count / 100))
}
