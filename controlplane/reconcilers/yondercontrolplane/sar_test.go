package yondercontrolplane_test

import (
	authorizationv1 "k8s.io/api/authorization/v1"
)

func subjectAccessReview(user, group, verb, resource string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: []string{group},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: "certificates.k8s.io", Resource: resource},
	}}
}
