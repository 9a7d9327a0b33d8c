/* SHA-256 and HMAC-SHA256 against published vectors: FIPS 180-4's examples (NIST
 * CSRC "SHA256.pdf", "SHA2_Additional.pdf"), lengths around the padding boundary,
 * and RFC 4231's HMAC test cases; incremental updates in odd pieces agree with one shot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "util/sha256.h"
#include "util/util.h"

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void expect_digest(const uint8_t d[DCP_SHA256_BYTES], const char *want, const char *what)
{
    char got[2 * DCP_SHA256_BYTES + 1];
    hex(d, DCP_SHA256_BYTES, got);
    if (strcmp(got, want))
        fail_msg("%s: got %s, want %s", what, got, want);
}

static void test_fips_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *msg, *digest;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    uint8_t d[DCP_SHA256_BYTES];
    for (size_t i = 0; i < DCP_ARRAY_SIZE(v); i++) {
        dcp_sha256(v[i].msg, strlen(v[i].msg), d);
        expect_digest(d, v[i].digest, v[i].msg);
    }
    /* One million 'a', fed in pieces of 997 bytes. */
    char chunk[997];
    memset(chunk, 'a', sizeof(chunk));
    struct dcp_sha256 s;
    dcp_sha256_init(&s);
    size_t left = 1000000;
    for (; left >= sizeof(chunk); left -= sizeof(chunk))
        dcp_sha256_update(&s, chunk, sizeof(chunk));
    dcp_sha256_update(&s, chunk, left);
    dcp_sha256_final(&s, d);
    expect_digest(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "a x 1e6");
}

/* Messages of lengths where the padding needs one block or two (byte i = i*31+7). */
static void test_padding_boundaries(void **state)
{
    (void)state;
    static const struct {
        size_t len;
        const char *digest;
    } v[] = {
        {55, "8aa994584139d128848eeebc4e815639ba5ab6e6e39574195a63ac4f14f7c43b"},
        {56, "ad574708f75c044c9b85de64cb568ee7711ff4f36448c6242f053ba8f6cc2b63"},
        {63, "280ed3e8ff1df845b2e7dfe6ac6cee817bef20e783cc65abc41b818b4d2fe076"},
        {64, "c6ab9724ade5b6a7a1edfffb12f3aa9181351355af8fd08c919952ad211339dd"},
        {65, "788367c73c7ddf4c53f65e68cc0d943e6227ab55b0e78ba63ace822b1c6301c0"},
        {119, "3d610547d68216dedf7435a4fb6260353911f6b3fd3f18805ddb8be285d726fe"},
        {120, "1f80156a804cb7862ad113e8200e9d74499723e7c7854d5f48776d3148e09656"},
        {128, "cc548ca2dec1f6fe4f58b2e27aa9c7521607df1130d140b55a4dad0665302356"},
    };
    uint8_t msg[128], d[DCP_SHA256_BYTES];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)(i * 31 + 7);
    for (size_t i = 0; i < DCP_ARRAY_SIZE(v); i++) {
        char what[32];
        snprintf(what, sizeof(what), "%zu bytes", v[i].len);
        dcp_sha256(msg, v[i].len, d);
        expect_digest(d, v[i].digest, what);
        /* The same bytes one at a time. */
        struct dcp_sha256 s;
        dcp_sha256_init(&s);
        for (size_t k = 0; k < v[i].len; k++)
            dcp_sha256_update(&s, msg + k, 1);
        dcp_sha256_final(&s, d);
        expect_digest(d, v[i].digest, what);
    }
}

static void test_rfc4231_hmac(void **state)
{
    (void)state;
    uint8_t k20[20], kaa20[20], dd50[50], k25[25], cd50[50], kaa131[131];
    memset(k20, 0x0b, sizeof(k20));
    memset(kaa20, 0xaa, sizeof(kaa20));
    memset(dd50, 0xdd, sizeof(dd50));
    for (int i = 0; i < 25; i++)
        k25[i] = (uint8_t)(i + 1);
    memset(cd50, 0xcd, sizeof(cd50));
    memset(kaa131, 0xaa, sizeof(kaa131));
    static const char big_key[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    static const char big_both[] = "This is a test using a larger than block-size key and a larger than block-size data."
                                   " The key needs to be hashed before being used by the HMAC algorithm.";
    const struct {
        const void *key;
        size_t key_len;
        const void *data;
        size_t len;
        const char *mac;
    } v[] = {
        {k20, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?", 28,
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {kaa20, 20, dd50, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {k25, 25, cd50, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {kaa131, 131, big_key, strlen(big_key), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {kaa131, 131, big_both, strlen(big_both), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    uint8_t d[DCP_SHA256_BYTES];
    for (size_t i = 0; i < DCP_ARRAY_SIZE(v); i++) {
        char what[32];
        snprintf(what, sizeof(what), "RFC 4231 case %zu", i + (i >= 4 ? 3 : 1)); /* cases 1-4, 6, 7 */
        dcp_hmac_sha256(v[i].key, v[i].key_len, v[i].data, v[i].len, d);
        expect_digest(d, v[i].mac, what);
        struct dcp_hmac m; /* split updates */
        dcp_hmac_init(&m, v[i].key, v[i].key_len);
        dcp_hmac_update(&m, v[i].data, v[i].len / 3);
        dcp_hmac_update(&m, (const uint8_t *)v[i].data + v[i].len / 3, v[i].len - v[i].len / 3);
        dcp_hmac_final(&m, d);
        expect_digest(d, v[i].mac, what);
    }
}

static void test_mac_equal(void **state)
{
    (void)state;
    uint8_t a[32], b[32];
    memset(a, 7, sizeof(a));
    memcpy(b, a, sizeof(b));
    assert_true(dcp_mac_equal(a, b, sizeof(a)));
    for (size_t i = 0; i < sizeof(a); i++) {
        b[i] ^= 0x80;
        assert_false(dcp_mac_equal(a, b, sizeof(a)));
        b[i] = a[i];
    }
    assert_true(dcp_mac_equal(a, b, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips_vectors),
        cmocka_unit_test(test_padding_boundaries),
        cmocka_unit_test(test_rfc4231_hmac),
        cmocka_unit_test(test_mac_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
