/* libsrtp 2 with its OpenSSL backend (the build bundled in the pylibsrtp
 * wheel that setup.sh installs) as the other side of sipsec's SRTP tests
 * and benchmark.
 *
 *   libsrtp_peer LIB MODE PROFILE KEY_HEX [MKI_HEX] < frames > results
 *     MODE: protect | unprotect | protect_rtcp | unprotect_rtcp
 *     frames in: 4-byte big-endian length + packet; out, per frame: one
 *     status byte (0 ok, else libsrtp's error code), a 4-byte length and
 *     the resulting packet (empty when refused).
 *   libsrtp_peer LIB bench PROFILE PACKETS ROUNDS
 *     prints one JSON object: ns per 172-byte packet (12-byte header,
 *     160 bytes of G.711), protect and unprotect, per round.
 *
 * LIB is the shared object holding libsrtp (pylibsrtp's _binding); it is
 * dlopen()ed, so this program links only libdl (and libpython, whose
 * symbols the extension module refers to). Types come from Debian's
 * libsrtp2-dev headers, whose 2.x ABI the 2.7 build keeps.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <srtp2/srtp.h>

typedef void (*policy_setter)(srtp_crypto_policy_t *);

static srtp_err_status_t (*p_init)(void);
static srtp_err_status_t (*p_create)(srtp_t *, const srtp_policy_t *);
static srtp_err_status_t (*p_dealloc)(srtp_t);
static srtp_err_status_t (*p_protect_mki)(srtp_ctx_t *, void *, int *, unsigned int, unsigned int);
static srtp_err_status_t (*p_unprotect_mki)(srtp_ctx_t *, void *, int *, unsigned int);
static srtp_err_status_t (*p_protect_rtcp_mki)(srtp_t, void *, int *, unsigned int, unsigned int);
static srtp_err_status_t (*p_unprotect_rtcp_mki)(srtp_t, void *, int *, unsigned int);

static void *lib;

static void *sym(const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "libsrtp_peer: %s not found: %s\n", name, dlerror());
        exit(2);
    }
    return f;
}

/* The RTP and RTCP policy setters for a suite name; the _32 suites keep
 * an 80-bit tag on SRTCP (RFC 3711 §5.2). */
static void set_profile(const char *name, srtp_policy_t *policy) {
    static const struct {
        const char *name, *rtp, *rtcp;
    } suites[] = {
        {"AES_CM_128_HMAC_SHA1_80", "srtp_crypto_policy_set_rtp_default", "srtp_crypto_policy_set_rtp_default"},
        {"AES_CM_128_HMAC_SHA1_32", "srtp_crypto_policy_set_aes_cm_128_hmac_sha1_32", "srtp_crypto_policy_set_rtp_default"},
        {"AES_192_CM_HMAC_SHA1_80", "srtp_crypto_policy_set_aes_cm_192_hmac_sha1_80", "srtp_crypto_policy_set_aes_cm_192_hmac_sha1_80"},
        {"AES_192_CM_HMAC_SHA1_32", "srtp_crypto_policy_set_aes_cm_192_hmac_sha1_32", "srtp_crypto_policy_set_aes_cm_192_hmac_sha1_80"},
        {"AES_256_CM_HMAC_SHA1_80", "srtp_crypto_policy_set_aes_cm_256_hmac_sha1_80", "srtp_crypto_policy_set_aes_cm_256_hmac_sha1_80"},
        {"AES_256_CM_HMAC_SHA1_32", "srtp_crypto_policy_set_aes_cm_256_hmac_sha1_32", "srtp_crypto_policy_set_aes_cm_256_hmac_sha1_80"},
        {"AEAD_AES_128_GCM", "srtp_crypto_policy_set_aes_gcm_128_16_auth", "srtp_crypto_policy_set_aes_gcm_128_16_auth"},
        {"AEAD_AES_256_GCM", "srtp_crypto_policy_set_aes_gcm_256_16_auth", "srtp_crypto_policy_set_aes_gcm_256_16_auth"},
    };
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        if (strcmp(name, suites[i].name) == 0) {
            ((policy_setter)sym(suites[i].rtp))(&policy->rtp);
            ((policy_setter)sym(suites[i].rtcp))(&policy->rtcp);
            return;
        }
    }
    fprintf(stderr, "libsrtp_peer: unknown profile %s\n", name);
    exit(2);
}

static size_t unhex(const char *hex, unsigned char *out, size_t cap) {
    size_t n = strlen(hex) / 2;
    if (n > cap) {
        fprintf(stderr, "libsrtp_peer: hex string too long\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
            fprintf(stderr, "libsrtp_peer: bad hex\n");
            exit(2);
        }
        out[i] = (unsigned char)v;
    }
    return n;
}

static unsigned char key[64], mki[128];
static size_t mki_len;
static srtp_master_key_t master;
static srtp_master_key_t *masters[1] = {&master};

static srtp_t session(const char *profile, const char *key_hex, const char *mki_hex, int outbound) {
    srtp_policy_t policy;
    memset(&policy, 0, sizeof policy);
    set_profile(profile, &policy);
    unhex(key_hex, key, sizeof key);
    policy.ssrc.type = outbound ? ssrc_any_outbound : ssrc_any_inbound;
    policy.window_size = 64;
    if (mki_hex && *mki_hex) {
        mki_len = unhex(mki_hex, mki, sizeof mki);
        master.key = key;
        master.mki_id = mki;
        master.mki_size = (unsigned)mki_len;
        policy.keys = masters;
        policy.num_master_keys = 1;
    } else {
        policy.key = key;
    }
    srtp_t s;
    srtp_err_status_t e = p_create(&s, &policy);
    if (e != srtp_err_status_ok) {
        fprintf(stderr, "libsrtp_peer: srtp_create failed: %d\n", e);
        exit(2);
    }
    return s;
}

static int read_all(unsigned char **data, size_t *len) {
    size_t cap = 1 << 20;
    *data = malloc(cap);
    *len = 0;
    size_t n;
    while ((n = fread(*data + *len, 1, cap - *len, stdin)) > 0) {
        *len += n;
        if (*len == cap) {
            cap *= 2;
            *data = realloc(*data, cap);
        }
    }
    return 0;
}

static int frames(const char *mode, srtp_t s) {
    unsigned char *data;
    size_t len;
    read_all(&data, &len);
    unsigned int use_mki = mki_len > 0;
    unsigned char buf[4096];
    for (size_t at = 0; at + 4 <= len;) {
        uint32_t n = (uint32_t)data[at] << 24 | data[at + 1] << 16 | data[at + 2] << 8 | data[at + 3];
        at += 4;
        if (n > 2048 || at + n > len) {
            fprintf(stderr, "libsrtp_peer: bad frame\n");
            return 2;
        }
        memcpy(buf, data + at, n);
        at += n;
        int out = (int)n;
        srtp_err_status_t e;
        if (strcmp(mode, "protect") == 0) {
            e = p_protect_mki(s, buf, &out, use_mki, 0);
        } else if (strcmp(mode, "unprotect") == 0) {
            e = p_unprotect_mki(s, buf, &out, use_mki);
        } else if (strcmp(mode, "protect_rtcp") == 0) {
            e = p_protect_rtcp_mki(s, buf, &out, use_mki, 0);
        } else {
            e = p_unprotect_rtcp_mki(s, buf, &out, use_mki);
        }
        unsigned char head[5] = {(unsigned char)e, 0, 0, 0, 0};
        if (e != srtp_err_status_ok) {
            out = 0;
        }
        head[1] = out >> 24;
        head[2] = out >> 16;
        head[3] = out >> 8;
        head[4] = out;
        fwrite(head, 1, 5, stdout);
        fwrite(buf, 1, out, stdout);
    }
    return 0;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The same loop as sipsec's side of the benchmark: copy a template
 * packet, set its sequence number, protect; unprotect copies of packets
 * protected up front. */
static int bench(const char *profile, long packets, int rounds) {
    static const char *key_hex =
        "0707070707070707070707070707070707070707070707070707070707070707"
        "0909090909090909090909090909";
    unsigned char template[172] = {0x80, 0x00, 0, 0, 0, 0, 0, 160, 0xca, 0xfe, 0xba, 0xbe};
    memset(template + 12, 0xd5, 160);
    unsigned char buf[256];
    unsigned char *batch = malloc((size_t)packets * 256);
    int *lens = malloc((size_t)packets * sizeof(int));
    double *protect = malloc(rounds * sizeof(double)), *unprotect = malloc(rounds * sizeof(double));
    /* GCM has a 12-byte salt: the key string is cut to fit. */
    char key_used[200];
    int aead = strncmp(profile, "AEAD", 4) == 0;
    int key_len = strstr(profile, "128") ? 16 : strstr(profile, "192") ? 24 : 32;
    snprintf(key_used, sizeof key_used, "%.*s%.*s", key_len * 2, key_hex, aead ? 24 : 28, key_hex + 64);
    for (int r = 0; r < rounds; r++) {
        srtp_t tx = session(profile, key_used, NULL, 1);
        double t0 = now_ns();
        for (long i = 0; i < packets; i++) {
            memcpy(buf, template, sizeof template);
            buf[2] = (unsigned char)(i >> 8);
            buf[3] = (unsigned char)i;
            int len = sizeof template;
            if (p_protect_mki(tx, buf, &len, 0, 0) != srtp_err_status_ok) {
                fprintf(stderr, "libsrtp_peer: protect failed\n");
                return 2;
            }
        }
        protect[r] = (now_ns() - t0) / packets;
        p_dealloc(tx);
        srtp_t sender = session(profile, key_used, NULL, 1);
        for (long i = 0; i < packets; i++) {
            unsigned char *p = batch + i * 256;
            memcpy(p, template, sizeof template);
            p[2] = (unsigned char)(i >> 8);
            p[3] = (unsigned char)i;
            lens[i] = sizeof template;
            p_protect_mki(sender, p, &lens[i], 0, 0);
        }
        p_dealloc(sender);
        srtp_t rx = session(profile, key_used, NULL, 0);
        t0 = now_ns();
        for (long i = 0; i < packets; i++) {
            memcpy(buf, batch + i * 256, lens[i]);
            int len = lens[i];
            if (p_unprotect_mki(rx, buf, &len, 0) != srtp_err_status_ok) {
                fprintf(stderr, "libsrtp_peer: unprotect failed at %ld\n", i);
                return 2;
            }
        }
        unprotect[r] = (now_ns() - t0) / packets;
        p_dealloc(rx);
    }
    printf("{\"profile\":\"%s\",\"packets\":%ld,\"protect_ns\":[", profile, packets);
    for (int r = 0; r < rounds; r++) printf("%s%.1f", r ? "," : "", protect[r]);
    printf("],\"unprotect_ns\":[");
    for (int r = 0; r < rounds; r++) printf("%s%.1f", r ? "," : "", unprotect[r]);
    qsort(protect, rounds, sizeof(double), cmp_double);
    qsort(unprotect, rounds, sizeof(double), cmp_double);
    printf("],\"protect_median_ns\":%.1f,\"unprotect_median_ns\":%.1f}\n", protect[rounds / 2], unprotect[rounds / 2]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: libsrtp_peer LIB MODE PROFILE ...\n");
        return 2;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "libsrtp_peer: cannot load %s: %s\n", argv[1], dlerror());
        return 2;
    }
    p_init = sym("srtp_init");
    p_create = sym("srtp_create");
    p_dealloc = sym("srtp_dealloc");
    p_protect_mki = sym("srtp_protect_mki");
    p_unprotect_mki = sym("srtp_unprotect_mki");
    p_protect_rtcp_mki = sym("srtp_protect_rtcp_mki");
    p_unprotect_rtcp_mki = sym("srtp_unprotect_rtcp_mki");
    if (p_init() != srtp_err_status_ok) {
        fprintf(stderr, "libsrtp_peer: srtp_init failed\n");
        return 2;
    }
    const char *mode = argv[2];
    if (strcmp(mode, "bench") == 0) {
        if (argc < 6) {
            fprintf(stderr, "usage: libsrtp_peer LIB bench PROFILE PACKETS ROUNDS\n");
            return 2;
        }
        return bench(argv[3], atol(argv[4]), atoi(argv[5]));
    }
    if (argc < 5) {
        fprintf(stderr, "usage: libsrtp_peer LIB MODE PROFILE KEY_HEX [MKI_HEX]\n");
        return 2;
    }
    int outbound = strncmp(mode, "protect", 7) == 0;
    srtp_t s = session(argv[3], argv[4], argc > 5 ? argv[5] : NULL, outbound);
    return frames(mode, s);
}
