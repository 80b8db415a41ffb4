import Testing
import MattePixels
@testable import PixelKernels

/// Compositing: pure pixel logic.
struct CompositorTests {
    private func image(_ pixels: [UInt8], width: Int) -> ([UInt8], Int) { (pixels, width) }

    @Test func attachAlphaKeepsColoursAndSwapsForRGBA() {
        let frame: [UInt8] = [10, 20, 30, 255, 40, 50, 60, 255]
        var matte: [UInt8] = [0, 200]
        var bgra = [UInt8](repeating: 0, count: 8), rgba = [UInt8](repeating: 0, count: 8)
        frame.withUnsafeBufferPointer { source in
            matte.withUnsafeMutableBufferPointer { alpha in
                let view = BGRAImage(base: source.baseAddress!, width: 2, height: 1, stride: 8)
                let plane = GrayView(base: alpha.baseAddress!, width: 2, height: 1, stride: 2)
                CompositorKernel.attachAlpha(frame: view, alpha: plane, output: &bgra, outputStride: 8, format: .bgra)
                CompositorKernel.attachAlpha(frame: view, alpha: plane, output: &rgba, outputStride: 8, format: .rgba)
            }
        }
        #expect(bgra == [10, 20, 30, 0, 40, 50, 60, 200])
        #expect(rgba == [30, 20, 10, 0, 60, 50, 40, 200])
    }

    /// Premultiplying is round(c × a / 255) for every colour and alpha byte, over every row tail
    /// of the four-pixel lanes; alpha itself is kept.
    @Test func premultiplyRoundsExactlyOnEveryWidth() {
        for width in 1...19 {
            var pixels = (0..<(width * 4 * 3)).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ width) }
            let before = pixels
            pixels.withUnsafeMutableBufferPointer { CompositorKernel.premultiply($0.baseAddress!, stride: width * 4, width: width, height: 3) }
            for index in 0..<pixels.count {
                #expect(pixels[index] == premultiplied(before[index], by: index % 4 == 3 ? 255 : before[index | 3]),
                        "width \(width), byte \(index)")
            }
        }
        // Every (colour, alpha) pair: pixel c * 256 + a holds colour c and alpha a.
        var all = [UInt8](repeating: 0, count: 256 * 256 * 4)
        for pair in 0..<65_536 {
            let colour = UInt8(pair / 256), alpha = UInt8(pair % 256)
            all[4 * pair] = colour
            all[4 * pair + 1] = colour
            all[4 * pair + 2] = colour
            all[4 * pair + 3] = alpha
        }
        all.withUnsafeMutableBufferPointer { CompositorKernel.premultiply($0.baseAddress!, stride: 256 * 4, width: 256, height: 256) }
        let wrong = (0..<65_536).filter { all[4 * $0] != premultiplied(UInt8($0 / 256), by: UInt8($0 % 256)) }
        #expect(wrong.isEmpty, "\(wrong.count) of 65536 (colour, alpha) pairs off")
    }

    private func premultiplied(_ colour: UInt8, by alpha: UInt8) -> UInt8 {
        UInt8((Double(colour) * Double(alpha) / 255).rounded())
    }

    @Test func flatteningOverAColourIsPorterDuffOver() {
        let frame: [UInt8] = [200, 100, 0, 255, 200, 100, 0, 255, 200, 100, 0, 255]
        var matte: [UInt8] = [255, 0, 128]
        var out = [UInt8](repeating: 0, count: 12), translucent = [UInt8](repeating: 0, count: 12)
        frame.withUnsafeBufferPointer { source in
            matte.withUnsafeMutableBufferPointer { alpha in
                let view = BGRAImage(base: source.baseAddress!, width: 3, height: 1, stride: 12)
                let plane = GrayView(base: alpha.baseAddress!, width: 3, height: 1, stride: 3)
                // Opaque green background.
                CompositorKernel.flattenOverColor(frame: view, alpha: plane, output: &out, outputStride: 12, format: .bgra,
                                            color: 0xFF00_FF00)
                // Fully transparent background: result keeps the frame's colour with alpha = matte.
                CompositorKernel.flattenOverColor(frame: view, alpha: plane, output: &translucent, outputStride: 12,
                                            format: .bgra, color: 0x0000_FF00)
            }
        }
        #expect(Array(out[0..<4]) == [200, 100, 0, 255])       // person
        #expect(Array(out[4..<8]) == [0, 255, 0, 255])         // background
        #expect(Array(out[8..<12]) == [100, 177, 0, 255])      // half: 200·.502, 100·.502 + 255·.498
        #expect(Array(translucent[0..<4]) == [200, 100, 0, 255])
        #expect(translucent[7] == 0)
        #expect(Array(translucent[8..<12]) == [200, 100, 0, 128])
    }

    /// Over an opaque colour the division is by a constant: the bytes are still those of the general
    /// Porter-Duff formula, for every colour value and α.
    @Test func flatteningOverAnOpaqueColourKeepsTheGeneralFormulasBytes() {
        let size = 256
        var frame = [UInt8](repeating: 0, count: size * size * 4), matte = [UInt8](repeating: 0, count: size * size)
        for value in 0..<size {
            for a in 0..<size {
                let i = value * size + a
                frame[4 * i] = UInt8(value); frame[4 * i + 1] = UInt8(255 - value); frame[4 * i + 2] = UInt8(value / 2)
                matte[i] = UInt8(a)
            }
        }
        for color: UInt32 in [0xFF00_B140, 0xFFFF_FFFF, 0xFF00_0000, 0xFF7F_3A01] {
            var out = [UInt8](repeating: 0, count: frame.count)
            frame.withUnsafeBufferPointer { source in
                matte.withUnsafeMutableBufferPointer { alpha in
                    CompositorKernel.flattenOverColor(frame: BGRAImage(base: source.baseAddress!, width: size, height: size, stride: size * 4),
                                                alpha: GrayView(base: alpha.baseAddress!, width: size, height: size, stride: size),
                                                output: &out, outputStride: size * 4, format: .bgra, color: color)
                }
            }
            let rgb = [Int(color & 0xFF), Int((color >> 8) & 0xFF), Int((color >> 16) & 0xFF)]  // B, G, R
            var mismatches = 0
            for i in matte.indices {
                let a = Int(matte[i]), under = 255 * (255 - a), total = a * 255 + under
                for c in 0..<3 where Int(out[4 * i + c]) != (Int(frame[4 * i + c]) * a * 255 + rgb[c] * under + total / 2) / total {
                    mismatches += 1
                }
                if out[4 * i + 3] != 255 { mismatches += 1 }
            }
            #expect(mismatches == 0, "colour \(String(color, radix: 16))")
        }
    }

    /// The whole-row composites work four or sixteen pixels at a time and the rest one by one: every
    /// width, both byte orders and each kind give the per-pixel formulas' bytes, and the soft-only
    /// passes touch only soft pixels.
    @Test(arguments: [1, 3, 4, 5, 15, 16, 17, 33, 259])
    func compositeRowsGiveThePerPixelBytesAtEveryWidth(width: Int) {
        var generator = SystemRandomNumberGenerator()
        let height = 3
        let frame = (0..<width * height * 4).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let under = (0..<width * height * 4).map { _ in UInt8.random(in: 0...255, using: &generator) }
        // Mattes with many 0s and 255s (the soft-only passes skip those) and every value in between.
        let matte = (0..<width * height).map { _ in [0, 255, UInt8.random(in: 0...255, using: &generator)][Int.random(in: 0...2)] }
        let color: UInt32 = 0xFF12_C456
        for format in [CompositeFormat.bgra, .rgba] {
            for softOnly in [false, true] {
                let (first, third) = format == .bgra ? (0, 2) : (2, 0)
                let sentinel: UInt8 = 7
                var attached = [UInt8](repeating: sentinel, count: frame.count), overColor = attached, overImage = attached
                frame.withUnsafeBufferPointer { f in
                    under.withUnsafeBufferPointer { u in
                        matte.withUnsafeBufferPointer { m in
                            let image = BGRAImage(base: f.baseAddress!, width: width, height: height, stride: width * 4)
                            let plane = GrayView(base: UnsafeMutablePointer(mutating: m.baseAddress!), width: width, height: height, stride: width)
                            CompositorKernel.attachAlpha(frame: image, alpha: plane, output: &attached, outputStride: width * 4,
                                                   format: format, softOnly: softOnly)
                            CompositorKernel.flattenOverColor(frame: image, alpha: plane, output: &overColor, outputStride: width * 4,
                                                        format: format, color: color, softOnly: softOnly)
                            CompositorKernel.flatten(frame: image, over: BGRAImage(base: u.baseAddress!, width: width, height: height, stride: width * 4),
                                               alpha: plane, output: &overImage, outputStride: width * 4, format: format, softOnly: softOnly)
                        }
                    }
                }
                let colour = [Int(color & 0xFF), Int((color >> 8) & 0xFF), Int((color >> 16) & 0xFF)]  // B, G, R
                var wrong = 0
                for i in matte.indices {
                    let a = Int(matte[i])
                    let touched = !softOnly || CompositorKernel.isSoft(matte[i])
                    for (c, position) in [(0, first), (1, 1), (2, third)] {
                        let s = Int(frame[4 * i + c])
                        let expected = (attached: s, color: (s * a + colour[c] * (255 - a) + 127) / 255,
                                        image: (s * a + Int(under[4 * i + c]) * (255 - a) + 127) / 255)
                        if Int(attached[4 * i + position]) != (touched ? expected.attached : Int(sentinel)) { wrong += 1 }
                        if Int(overColor[4 * i + position]) != (touched ? expected.color : Int(sentinel)) { wrong += 1 }
                        if Int(overImage[4 * i + position]) != (touched ? expected.image : Int(sentinel)) { wrong += 1 }
                    }
                    if attached[4 * i + 3] != (touched ? matte[i] : sentinel) { wrong += 1 }
                    if overColor[4 * i + 3] != (touched ? 255 : sentinel) || overImage[4 * i + 3] != (touched ? 255 : sentinel) { wrong += 1 }
                }
                #expect(wrong == 0, "width \(width), \(format), softOnly \(softOnly)")
            }
        }
    }

    /// Mattes are mostly runs of 0 and 255, which the whole-row passes treat without arithmetic (a run
    /// of 0 is the colour, a run of 255 over opaque pixels is left as it is in place). In place and
    /// into another buffer, in both byte orders, with opaque and translucent frame pixels, every width's
    /// tail: the per-pixel formulas' bytes.
    @Test(arguments: [16, 47, 259])
    func runsOfZeroAndOpaqueGiveTheFormulasBytesInPlaceAndNot(width: Int) {
        var generator = SystemRandomNumberGenerator()
        let height = 4
        var frame = (0..<width * height * 4).map { _ in UInt8.random(in: 0...255, using: &generator) }
        // Rows 0 and 1 opaque (as decoded video is), rows 2 and 3 with any alpha.
        for i in 0..<(2 * width) { frame[4 * i + 3] = 255 }
        // Runs of sixteen: all 0, all 255, or mixed.
        let matte = (0..<height).flatMap { _ in
            stride(from: 0, to: width, by: 16).flatMap { start -> [UInt8] in
                let count = min(16, width - start)
                switch Int.random(in: 0...2, using: &generator) {
                case 0: return [UInt8](repeating: 0, count: count)
                case 1: return [UInt8](repeating: 255, count: count)
                default: return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
                }
            }
        }
        let color: UInt32 = 0xFF30_A0F0
        let colour = [Int(color & 0xFF), Int((color >> 8) & 0xFF), Int((color >> 16) & 0xFF)]  // B, G, R
        for format in [CompositeFormat.bgra, .rgba] {
            let (first, third) = format == .bgra ? (0, 2) : (2, 0)
            var expectedAttached = frame, expectedColor = frame
            for i in matte.indices {
                let a = Int(matte[i])
                for (c, position) in [(0, first), (1, 1), (2, third)] {
                    let s = Int(frame[4 * i + c])
                    expectedAttached[4 * i + position] = UInt8(s)
                    expectedColor[4 * i + position] = UInt8((s * a + colour[c] * (255 - a) + 127) / 255)
                }
                expectedAttached[4 * i + 3] = matte[i]
                expectedColor[4 * i + 3] = 255
            }
            for inPlace in format == .bgra ? [false, true] : [false] {
                var attached = inPlace ? frame : [UInt8](repeating: 7, count: frame.count)
                var overColor = attached
                let source = frame
                matte.withUnsafeBufferPointer { m in
                    let plane = GrayView(base: m.baseAddress!, width: width, height: height, stride: width)
                    for isColor in [false, true] {
                        var target = isColor ? overColor : attached
                        target.withUnsafeMutableBufferPointer { out in
                            source.withUnsafeBufferPointer { f in
                                // In place the frame is the output itself.
                                let base = inPlace ? UnsafePointer(out.baseAddress!) : f.baseAddress!
                                let image = BGRAImage(base: base, width: width, height: height, stride: width * 4)
                                if isColor {
                                    CompositorKernel.flattenOverColor(frame: image, alpha: plane, output: out.baseAddress!,
                                                                outputStride: width * 4, format: format, color: color)
                                } else {
                                    CompositorKernel.attachAlpha(frame: image, alpha: plane, output: out.baseAddress!,
                                                           outputStride: width * 4, format: format)
                                }
                            }
                        }
                        if isColor { overColor = target } else { attached = target }
                    }
                }
                #expect(zip(attached, expectedAttached).filter { $0 != $1 }.isEmpty, "attachAlpha, width \(width), \(format), in place \(inPlace)")
                #expect(zip(overColor, expectedColor).filter { $0 != $1 }.isEmpty, "flattenOverColor, width \(width), \(format), in place \(inPlace)")
            }
        }
    }

    /// The 16-bit division the vector path uses, x / 255 = (x + 1 + x >> 8) >> 8, for every x it meets.
    @Test func divisionBy255InSixteenBitsIsExactForEveryBlend() {
        #expect((0...(255 * 255 + 127)).allSatisfy { x in (x + 1 + (x >> 8)) >> 8 == x / 255 && x + 1 + (x >> 8) < 65536 })
    }
}
